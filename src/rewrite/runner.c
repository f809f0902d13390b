/* runner.c — equality saturation: search every rule, apply all matches,
 * rebuild once, repeat, until saturated or a limit is reached; and the
 * backoff scheduler that keeps commutativity and associativity from eating
 * the memory.
 *
 * One iteration = search all unbanned rules on the rebuilt e-graph (read
 * only), then apply every collected match, then one eg_rebuild. Backoff: a
 * rule finding more than its threshold of matches in one iteration has them
 * discarded and is banned for ban_len iterations; each ban doubles both, so
 * an explosive rule gets rarer and rarer chances. "Saturated" is claimed only
 * when an iteration changed nothing and no rule was banned; if a quiet
 * iteration had bans, the bans are lifted and the run goes on.
 */
#include <string.h>
#include <time.h>

#include "base.h"
#include "rewrite.h"

const char *eg_stop_name(eg_stop s) {
    switch (s) {
    case EG_STOP_SATURATED: return "saturated";
    case EG_STOP_ITERATIONS: return "iteration limit";
    case EG_STOP_NODES: return "node limit";
    case EG_STOP_TIME: return "time limit";
    default: return "not run";
    }
}

/* classes holding at least one node of each op: the candidates for a rule's root */
typedef struct op_index {
    eg_id *cls[EG_OP_COUNT];
    uint32_t n[EG_OP_COUNT], cap[EG_OP_COUNT];
} op_index;

static void index_build(op_index *ix, egraph *eg) {
    for (int op = 0; op < EG_OP_COUNT; op++) ix->n[op] = 0;
    for (eg_id c = 0; c < eg->nclasses; c++) {
        if (!eg_is_root(eg, c)) continue;
        const eg_class *k = &eg->classes[c];
        for (uint32_t i = 0; i < k->nnodes; i++) {
            int op = eg->nodes[k->nodes[i]].op;
            if (op >= EG_OP_COUNT) continue;
            if (ix->n[op] && ix->cls[op][ix->n[op] - 1] == c) continue;
            KILN_GROW(ix->cls[op], ix->cap[op], ix->n[op] + 1);
            ix->cls[op][ix->n[op]++] = c;
        }
    }
}

static void index_free(op_index *ix) {
    for (int op = 0; op < EG_OP_COUNT; op++) free(ix->cls[op]);
}

eg_stop eg_run(eg_kiln *ek, const eg_ruleset *rs, const eg_limits *lim_in, eg_run_report *rep) {
    egraph *eg = ek->eg;
    eg_limits lim = lim_in ? *lim_in : (eg_limits){0, 0, 0, 0, 0};
    if (!lim.max_iters) lim.max_iters = 30;
    if (!lim.max_nodes) lim.max_nodes = 200000;
    if (lim.max_seconds <= 0) lim.max_seconds = 10;
    if (!lim.match_limit) lim.match_limit = 1000;
    if (!lim.ban_length) lim.ban_length = 2;

    memset(rep, 0, sizeof *rep);
    rep->rs = rs;
    rep->nrules = rs->n;
    rep->rules = kiln_xcalloc(rs->n ? rs->n : 1, sizeof(eg_rule_stats));
    for (uint32_t r = 0; r < rs->n; r++) {
        rep->rules[r].threshold = lim.match_limit;
        rep->rules[r].ban_len = lim.ban_length;
    }
    double t0 = kiln_now_s();
    op_index ix;
    memset(&ix, 0, sizeof ix);
    eg_subst *m = NULL;
    uint32_t nm = 0, capm = 0;
    uint32_t *start = kiln_xcalloc(rs->n + 1, sizeof(uint32_t));
    eg_stop stop = EG_STOP_NONE;
    eg_rebuild(eg);

    for (uint32_t iter = 0;; iter++) {
        if (iter >= lim.max_iters) { stop = EG_STOP_ITERATIONS; break; }
        if (kiln_now_s() - t0 > lim.max_seconds) { stop = EG_STOP_TIME; break; }
        if (eg->nlive_nodes > lim.max_nodes) { stop = EG_STOP_NODES; break; }
        rep->iterations = iter + 1;

        /* search */
        index_build(&ix, eg);
        nm = 0;
        int banned_any = 0, timed_out = 0;
        for (uint32_t r = 0; r < rs->n; r++) {
            eg_rule_stats *st = &rep->rules[r];
            const eg_rule *rule = &rs->rules[r];
            start[r] = nm;
            if (st->banned_until > iter) {
                banned_any = 1;
                continue;
            }
            int op = rule->lhs.n[rule->lhs.root].op;
            uint32_t limit = nm + st->threshold + 1;
            for (uint32_t i = 0; i < ix.n[op] && nm < limit; i++) eg_match(ek, rule, ix.cls[op][i], &m, &nm, &capm, limit);
            uint32_t found = nm - start[r];
            if (found > st->threshold) {
                nm = start[r]; /* discard: the rule is exploding */
                st->bans++;
                st->banned_until = iter + st->ban_len;
                st->threshold *= 2;
                st->ban_len *= 2;
                banned_any = 1;
            } else {
                st->matches += found;
            }
            if (kiln_now_s() - t0 > lim.max_seconds) {
                timed_out = 1;
                break;
            }
        }
        start[rs->n] = nm;
        if (timed_out) { stop = EG_STOP_TIME; break; }

        /* apply */
        uint64_t unions_before = eg->nunions;
        uint32_t nodes_before = eg->nnodes;
        int over = 0;
        for (uint32_t r = 0; r < rs->n && !over; r++) {
            uint32_t end = r + 1 <= rs->n ? start[r + 1] : nm;
            if (start[r] > end) end = start[r];
            for (uint32_t i = start[r]; i < end; i++) {
                eg_id rhs = eg_rule_apply(ek, &rs->rules[r], &m[i]);
                uint32_t conflicts = eg->analysis_conflicts;
                if (rhs != EG_NONE && eg_union(eg, m[i].root, rhs)) rep->rules[r].applied++;
                rep->rules[r].conflicts += eg->analysis_conflicts - conflicts;
                if (eg->nlive_nodes > lim.max_nodes) {
                    over = 1;
                    break;
                }
            }
        }
        eg_rebuild(eg);
        if (over) { stop = EG_STOP_NODES; break; }
        int changed = eg->nunions != unions_before || eg->nnodes != nodes_before;
        if (!changed) {
            if (!banned_any) { stop = EG_STOP_SATURATED; break; }
            for (uint32_t r = 0; r < rs->n; r++) rep->rules[r].banned_until = 0;
        }
    }
    free(m);
    free(start);
    index_free(&ix);
    rep->stop = stop;
    rep->seconds = kiln_now_s() - t0;
    rep->nodes = eg->nlive_nodes;
    rep->classes = eg->nlive_classes;
    return stop;
}

void eg_report_free(eg_run_report *rep) {
    free(rep->rules);
    rep->rules = NULL;
}
