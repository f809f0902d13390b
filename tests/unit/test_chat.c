/* test_chat.c — chat templates: kiln's Jinja subset (src/model/jinja*.c) and
 * chat_render (src/model/chat.c).
 *
 * The families' published templates (the .jinja files in tests/data/chat, as in the
 * models' tokenizer_config.json) rendered for one conversation are compared
 * with the prompt formats the families document, written out here by hand;
 * the built-in formats and a GGUF file carrying a template give the same
 * text; language features one by one (scoping, namespace, loop variables,
 * slices, filters, tests, whitespace control); malformed and hostile
 * templates end with an error message, never a crash or a hang; and a
 * deterministic mutation fuzz of the four templates (run under ASan in CI).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "chat.h"
#include "check.h"
#include "gguf.h"
#include "jinja.h"

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = kiln_xmalloc(1 << 16);
    *n = fread(buf, 1, (1 << 16) - 1, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

static const chat_msg CONVO[] = {
    {"system", "You are terse."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "How are you?"},
};
#define N_CONVO 4

static jinja_ctx *convo_ctx(const chat_msg *m, int n, int gen, const char *bos, const char *eos) {
    const char *vals[16];
    for (int i = 0; i < n; i++) vals[2 * i] = m[i].role, vals[2 * i + 1] = m[i].content;
    static const char *const keys[] = {"role", "content"};
    jinja_ctx *c = jinja_ctx_new();
    jinja_set_records(c, "messages", keys, 2, vals, n);
    jinja_set_bool(c, "add_generation_prompt", gen);
    jinja_set_str(c, "bos_token", bos);
    jinja_set_str(c, "eos_token", eos);
    return c;
}

/* the documented formats of the four families for CONVO */
static const struct family {
    const char *file, *builtin, *bos, *eos, *want;
} FAMILIES[] = {
    {"tests/data/chat/gemma3.jinja", "gemma", "<bos>", "<eos>",
     "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
     "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n"},
    {"tests/data/chat/qwen2.5.jinja", "chatml", "", "<|im_end|>",
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!"
     "<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n"},
    {"tests/data/chat/llama3.jinja", "llama3", "<|begin_of_text|>", "<|eot_id|>",
     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|><|start_header_id|>user"
     "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
     "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|><|start_header_id|>assistant"
     "<|end_header_id|>\n\n"},
    {"tests/data/chat/llama2.jinja", "llama2", "<s>", "</s>",
     "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? [/INST]"},
};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

static void test_families(void) {
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const struct family *fm = &FAMILIES[i];
        CASE_BEGIN(fm->file);
        size_t n = 0;
        char *src = read_file(fm->file, &n), *out = NULL, err[256] = "";
        CHECK(src != NULL, "cannot read %s (tests run from the repository root)", fm->file);
        if (src) {
            jinja_ctx *c = convo_ctx(CONVO, N_CONVO, 1, fm->bos, fm->eos);
            kiln_status st = jinja_render(src, n, c, &out, err, sizeof err);
            CHECK(st == KILN_OK, "%s", err);
            if (out) CHECK(strcmp(out, fm->want) == 0, "rendered\n[%s]\nwant\n[%s]", out, fm->want);
            free(out);
            jinja_ctx_free(c);
        }
        free(src);
        CASE_END();
    }
}

/* the built-in formats: the same text as the published templates, with an
 * empty bos_token (no file) */
static void test_builtins(void) {
    CASE_BEGIN("builtin_formats");
    for (size_t i = 0; i < N_FAMILIES; i++) {
        const struct family *fm = &FAMILIES[i];
        char *out = NULL, err[256] = "", want[1024] = "";
        CHECK(chat_render(NULL, fm->builtin, CONVO, N_CONVO, 1, &out, err, sizeof err) == KILN_OK, "%s: %s",
              fm->builtin, err);
        /* the published text with the file's BOS and EOS texts left out */
        const char *w = fm->want;
        size_t k = 0;
        while (*w && k + 1 < sizeof want) {
            if (fm->bos[0] && !strncmp(w, fm->bos, strlen(fm->bos))) w += strlen(fm->bos);
            else if (i == 3 && !strncmp(w, fm->eos, strlen(fm->eos))) w += strlen(fm->eos);
            else want[k++] = *w++;
        }
        want[k] = 0;
        if (out) CHECK(strcmp(out, want) == 0, "%s rendered\n[%s]\nwant\n[%s]", fm->builtin, out, want);
        free(out);
    }
    char *out = NULL, err[256] = "";
    CHECK(chat_render(NULL, "vicuna", CONVO, N_CONVO, 1, &out, err, sizeof err) == KILN_ERR_INVALID && !out &&
              strstr(err, "vicuna"),
          "unknown name: %s", err);
    chat_msg bad = {"user", NULL};
    CHECK(chat_render(NULL, "chatml", &bad, 1, 1, &out, err, sizeof err) == KILN_ERR_INVALID && !out, "no content");
    CHECK(chat_is_builtin("llama3") && !chat_is_builtin("llama4") && !chat_is_builtin(NULL), "chat_is_builtin");
    /* add_generation_prompt = 0: no opening of the assistant's turn */
    CHECK(chat_render(NULL, "chatml", CONVO + 1, 1, 0, &out, err, sizeof err) == KILN_OK && out &&
              !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n"),
          "no generation prompt: [%s]", out ? out : err);
    free(out);
    CASE_END();
}

/* a GGUF file with a template and a vocabulary: chat_render uses the file's
 * template and BOS text; without a template, the guess from the vocabulary */
static void test_gguf(void) {
    CASE_BEGIN("gguf_template");
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_test_chat_%d.gguf", (int)getpid());
    size_t n = 0;
    char *src = read_file("tests/data/chat/gemma3.jinja", &n);
    CHECK(src != NULL, "gemma3.jinja");
    static const char *const toks[] = {"<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>", "a"};
    for (int with = 1; with >= 0 && src; with--) {
        gguf_writer *w = gguf_writer_new();
        gguf_writer_add_str(w, "general.architecture", "gemma3");
        gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, NULL, 6);
        gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 2);
        gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 1);
        if (with) gguf_writer_add_str(w, "tokenizer.chat_template", src);
        CHECK(gguf_writer_write(w, path) == KILN_OK, "write: %s", gguf_writer_error(w));
        gguf_writer_free(w);
        gguf_file *f = NULL;
        char err[256] = "", *out = NULL;
        CHECK(gguf_open(path, 0, &f, err, sizeof err) == KILN_OK, "open: %s", err);
        if (!f) continue;
        CHECK(chat_has_template(f) == with, "chat_has_template");
        CHECK(!strcmp(chat_fallback_name(f), "gemma"), "fallback %s", chat_fallback_name(f));
        CHECK(chat_render(f, NULL, CONVO, N_CONVO, 1, &out, err, sizeof err) == KILN_OK, "%s", err);
        const char *want = with ? FAMILIES[0].want : FAMILIES[0].want; /* the built-in gemma is the same text */
        if (out) CHECK(!strcmp(out, want), "with=%d rendered [%s]", with, out);
        free(out);
        /* a forced name wins over the file's template */
        CHECK(chat_render(f, "chatml", CONVO + 1, 1, 1, &out, err, sizeof err) == KILN_OK && out &&
                  !strcmp(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"),
              "forced chatml: [%s]", out ? out : err);
        free(out);
        gguf_close(f);
    }
    unlink(path);
    /* gemma's template refuses roles that do not alternate */
    chat_msg twice[] = {{"user", "a"}, {"user", "b"}};
    char err[256] = "", *out = NULL;
    CHECK(chat_render(NULL, "gemma", twice, 2, 1, &out, err, sizeof err) != KILN_OK && !out &&
              strstr(err, "alternate"),
          "raise_exception: %s", err);
    free(src);
    CASE_END();
}

/* render src with x = [1, 2, 3], s = "  Hello World  ", msgs = CONVO */
static int render(const char *src, char **out, char *err, size_t errlen) {
    jinja_ctx *c = convo_ctx(CONVO, N_CONVO, 1, "<s>", "</s>");
    jinja_set_str(c, "s", "  Hello World  ");
    kiln_status st = jinja_render(src, strlen(src), c, out, err, errlen);
    jinja_ctx_free(c);
    return st == KILN_OK;
}

static void test_features(void) {
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 1 / 2 }}|{{ 2 ** 3 }}", "7|3|-4|1|2|0.5|8.0"},
        {"{{ 'a' ~ 1 ~ none }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ true }}|{{ none }}", "a1None|ababab|[1, 2]|True|None"},
        {"{{ s | trim }}|{{ s.strip() | upper }}|{{ s | lower | trim }}|{{ s.lstrip() }}|", "Hello World|HELLO WORLD|hello world|Hello World  |"},
        {"{{ messages | length }}|{{ messages[0].role }}|{{ messages[-1]['content'] }}|{{ messages[1:3] | map(attribute='role') | join(',') }}",
         "4|system|How are you?|user,assistant"},
        {"{{ 'abcdef'[1:4] }}|{{ 'abc'[::-1] }}|{{ [1,2,3,4][::2] }}|{{ 'abc'[5] }}|", "bcd|cba|[1, 3]||"},
        {"{% for m in messages %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
         "1TrueFalse4;2FalseFalse4;3FalseFalse4;4FalseTrue4;"},
        {"{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}", "1"},
        {"{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}", "4"},
        {"{% if undefined_thing is defined %}a{% elif 1 > 2 %}b{% else %}c{% endif %}", "c"},
        {"{{ 'x' if messages else 'y' }}{{ 'x' if not messages else 'y' }}", "xy"},
        {"{% for m in messages if m.role == 'user' %}{{ m.content }},{% endfor %}", "Hi,How are you?,"},
        {"{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m.role[0] }}{% endfor %}", "su"},
        {"{% for m in messages %}{% if m.role == 'user' %}{% continue %}{% endif %}{{ m.role[0] }}{% endfor %}", "sa"},
        {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}", "a=1 b=2 "},
        {"{% for x in [] %}a{% else %}empty{% endfor %}", "empty"},
        {"{{ {'a': [1, 'b', none]} | tojson }}|{{ 'q\"\\n' | tojson }}", "{\"a\": [1, \"b\", null]}|\"q\\\"\\n\""},
        {"{{ 'a,b,c'.split(',') }}|{{ 'a b  c'.split() | length }}|{{ 'Hello'.startswith('He') }}|{{ 'x'.endswith('y') }}",
         "['a', 'b', 'c']|3|True|False"},
        {"{{ 'b' in 'abc' }}{{ 'role' in messages[0] }}{{ 3 not in [1, 2] }}{{ messages[0] is mapping }}{{ 1 is odd }}",
         "TrueTrueTrueTrueTrue"},
        {"{{ (messages | selectattr('role', 'equalto', 'user') | list | length) }}|{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join('/') }}",
         "2|system/assistant"},
        {"{{ nothing | default('dflt') }}|{{ '' | default('e', true) }}|{{ 'hello world' | title }}|{{ 'abc' | replace('b', 'XY') }}",
         "dflt|e|Hello World|aXYc"},
        {"{{ messages[0].get('role') }}|{{ messages[0].get('nope', 'd') }}|{{ range(3) | list }}|{{ 3.0 }}|{{ 0.1 }}",
         "system|d|[0, 1, 2]|3.0|0.1"},
        /* whitespace: trim_blocks and lstrip_blocks, and the - markers */
        {"a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc"},
        {"a  {{- ' b ' -}}  c {# note #}\nd", "a b c d"},
        {"{%+ if true %}x{% endif %}", "x"},
        {"  {{ 'k' }}", "  k"},
    };
    CASE_BEGIN("jinja_features");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, err[256] = "";
        int ok = render(cases[i].src, &out, err, sizeof err);
        CHECK(ok, "case %zu [%s]: %s", i, cases[i].src, err);
        if (out) CHECK(!strcmp(out, cases[i].want), "case %zu [%s]: got [%s] want [%s]", i, cases[i].src, out, cases[i].want);
        free(out);
    }
    CASE_END();
}

static void test_errors(void) {
    static const struct {
        const char *src, *msg;
    } cases[] = {
        {"{{ 1 + }}", "unexpected"},
        {"{% if true %}x", "ends inside a block"},
        {"{% for x in y %}", "ends inside"},
        {"{{ 'abc }}", "not closed"},
        {"{{ x", "not closed"},
        {"{# never", "not closed"},
        {"{% endif %}", "misplaced"},
        {"{% macro m() %}{% endmacro %}", "unsupported"},
        {"{{ s | frobnicate }}", "unknown filter"},
        {"{{ s is frobnicated }}", "unknown test"},
        {"{{ raise_exception('boom') }}", "boom"},
        {"{{ nothing.attr }}", "undefined"},
        {"{{ 1 / 0 }}", "division by zero"},
        {"{{ 1 < 'a' }}", "cannot order"},
        {"{{ s() }}", "not a function"},
        {"{{ 1 + 'a' }}", "arithmetic"},
        {"{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}{% endfor %}", "too "},
        {"{% set x = 'aaaaaaaaaaaaaaaa' %}{% for i in range(40) %}{% set x = x ~ x %}{% endfor %}", "longer than|too much memory"},
        {"{{ 'a' * 100000000000 }}", "longer than"},
        {"{{ range(100000000) }}", "million"},
        {"{{ 99999999999999999999 }}", "too large"},
        {"{% set a.b = 1 %}", "namespace"},
        {"{{ ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((1 }}", "too deeply"},
        {"\x01{{ \x01 }}", "unexpected character"},
    };
    CASE_BEGIN("jinja_errors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, err[256] = "";
        int ok = render(cases[i].src, &out, err, sizeof err);
        CHECK(!ok && !out, "case %zu [%.60s] rendered [%s]", i, cases[i].src, out ? out : "");
        /* msg: alternatives separated by | */
        int found = 0;
        for (const char *m = cases[i].msg; *m && !found;) {
            size_t k = strcspn(m, "|");
            char want[64];
            snprintf(want, sizeof want, "%.*s", (int)k, m);
            found = strstr(err, want) != NULL;
            m += k + (m[k] == '|');
        }
        CHECK(found, "case %zu [%.60s]: message '%s' lacks '%s'", i, cases[i].src, err, cases[i].msg);
        free(out);
    }
    CASE_END();
}

/* deterministic mutations of the real templates: every result is output or
 * an error message; ASan/UBSan builds catch what a crash test would miss */
static void test_mutations(void) {
    CASE_BEGIN("jinja_mutation_fuzz");
    int n_iter = getenv("KILN_FUZZ_CHAT") ? atoi(getenv("KILN_FUZZ_CHAT")) : 4000, ok = 0, bad = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    static const char *const pieces[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "'", "\"", "(", ")", "[", "]",
                                         "|", ".", "if ", "for ", "endfor", "endif", " in ", "loop", "messages",
                                         "~", "*", "not ", "{% set x = x ~ x %}", "0", "-1", "\\", "\n"};
    char *srcs[N_FAMILIES];
    size_t lens[N_FAMILIES];
    for (size_t i = 0; i < N_FAMILIES; i++) srcs[i] = read_file(FAMILIES[i].file, &lens[i]);
    for (int it = 0; it < n_iter; it++) {
        size_t fi = (size_t)it % N_FAMILIES;
        if (!srcs[fi]) continue;
        char buf[16384];
        size_t n = lens[fi] < sizeof buf - 512 ? lens[fi] : sizeof buf - 512;
        memcpy(buf, srcs[fi], n);
        int muts = 1 + (int)((rng >> 7) % 4);
        for (int m = 0; m < muts && n > 1; m++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)((rng >> 33) % n);
            int kind = (int)((rng >> 20) % 3);
            if (kind == 0) { /* delete a span */
                size_t k = 1 + (size_t)((rng >> 12) % 8);
                if (at + k > n) k = n - at;
                memmove(buf + at, buf + at + k, n - at - k);
                n -= k;
            } else if (kind == 1) { /* insert a piece */
                const char *p = pieces[(rng >> 40) % (sizeof pieces / sizeof pieces[0])];
                size_t k = strlen(p);
                if (n + k < sizeof buf) {
                    memmove(buf + at + k, buf + at, n - at);
                    memcpy(buf + at, p, k);
                    n += k;
                }
            } else buf[at] = (char)(rng >> 48); /* flip a byte */
        }
        jinja_ctx *c = convo_ctx(CONVO, N_CONVO, (int)(rng & 1), "<s>", "</s>");
        char *out = NULL, err[256] = "";
        kiln_status st = jinja_render(buf, n, c, &out, err, sizeof err);
        if (st == KILN_OK) ok += out != NULL;
        else {
            bad++;
            CHECK(out == NULL && err[0], "iteration %d: an error without a message", it);
        }
        free(out);
        jinja_ctx_free(c);
    }
    for (size_t i = 0; i < N_FAMILIES; i++) free(srcs[i]);
    CHECK(ok > 0 && bad > 0, "mutations all %s (%d rendered, %d errors)", ok ? "rendered" : "failed", ok, bad);
    printf("jinja_mutation_fuzz: %d templates rendered, %d refused with a message\n", ok, bad);
    CASE_END();
}

int main(void) {
    test_families();
    test_builtins();
    test_gguf();
    test_features();
    test_errors();
    test_mutations();
    return check_exit();
}
