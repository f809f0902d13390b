/* report.c — what `kiln explain --egraph` prints about a saturation run:
 * classes, nodes, iterations, time, stop reason, and per rule its matches,
 * applications and bans; as text for people and as JSON for tools.
 * Both return malloc'd strings; rules that never matched are listed too, so
 * a reader sees what was tried.
 */
#include <stdarg.h>
#include <string.h>

#include "base.h"
#include "rewrite.h"

char *eg_report_text(const eg_kiln *ek, const eg_run_report *rep) {
    kiln_sb b = {0};
    kiln_sb_printf(&b, "e-graph: %u classes, %u nodes, %u views interned\n", rep->classes, rep->nodes,
              ek ? ek->nviews : 0);
    kiln_sb_printf(&b, "run: %u iterations, %.3f s, stopped: %s\n", rep->iterations, rep->seconds, eg_stop_name(rep->stop));
    if (ek && ek->eg->analysis_conflicts)
        kiln_sb_printf(&b, "WARNING: %u analysis conflicts (an unsound rule merged different shapes or constants)\n",
                  ek->eg->analysis_conflicts);
    kiln_sb_printf(&b, "%-20s %10s %10s %5s %9s\n", "rule", "matches", "applied", "bans", "conflicts");
    for (uint32_t r = 0; r < rep->nrules; r++) {
        const eg_rule_stats *st = &rep->rules[r];
        kiln_sb_printf(&b, "%-20s %10llu %10llu %5u %9u\n", rep->rs->rules[r].def.name, (unsigned long long)st->matches,
                  (unsigned long long)st->applied, st->bans, st->conflicts);
    }
    if (!b.s) kiln_sb_printf(&b, "%s", "");
    return b.s;
}

static void json_str(kiln_sb *b, const char *s) {
    kiln_sb_printf(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') kiln_sb_printf(b, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) kiln_sb_printf(b, "\\u%04x", (unsigned)*s);
        else kiln_sb_printf(b, "%c", *s);
    }
    kiln_sb_printf(b, "\"");
}

char *eg_report_json(const eg_kiln *ek, const eg_run_report *rep) {
    kiln_sb b = {0};
    kiln_sb_printf(&b, "{\"classes\": %u, \"nodes\": %u, \"views\": %u, \"iterations\": %u, \"seconds\": %.6f, ", rep->classes,
              rep->nodes, ek ? ek->nviews : 0, rep->iterations, rep->seconds);
    kiln_sb_printf(&b, "\"stop\": ");
    json_str(&b, eg_stop_name(rep->stop));
    kiln_sb_printf(&b, ", \"analysis_conflicts\": %u, \"rules\": [", ek ? ek->eg->analysis_conflicts : 0);
    for (uint32_t r = 0; r < rep->nrules; r++) {
        const eg_rule_stats *st = &rep->rules[r];
        kiln_sb_printf(&b, "%s{\"name\": ", r ? ", " : "");
        json_str(&b, rep->rs->rules[r].def.name);
        kiln_sb_printf(&b, ", \"matches\": %llu, \"applied\": %llu, \"bans\": %u, \"conflicts\": %u}",
                  (unsigned long long)st->matches, (unsigned long long)st->applied, st->bans, st->conflicts);
    }
    kiln_sb_printf(&b, "]}\n");
    return b.s;
}
