/* check.h — the tiny assertion kit of kiln's C tests.
 *
 * A test binary calls CHECK(...) as often as it likes; each distinct test case
 * ends with PASS(name) or is reported as FAIL by the first failing CHECK inside
 * CASE(name){...}. Lines "PASS name" / "FAIL name: why" are what tests/run.sh
 * counts. main() returns check_exit() (non-zero when anything failed).
 */
#ifndef KILN_CHECK_H
#define KILN_CHECK_H

#include <stdio.h>

static int check_failed_cases, check_case_failed;
static const char *check_case_name = "";

#define CASE_BEGIN(name) (check_case_name = (name), check_case_failed = 0)
#define CASE_END()                                                                  \
    do {                                                                            \
        if (check_case_failed) check_failed_cases++;                                \
        else printf("PASS %s\n", check_case_name);                                  \
        fflush(stdout);                                                             \
    } while (0)

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        if (!(cond)) {                                                              \
            if (!check_case_failed) {                                               \
                printf("FAIL %s: %s:%d: %s: ", check_case_name, __FILE__, __LINE__, #cond); \
                printf(__VA_ARGS__);                                                \
                printf("\n");                                                       \
                fflush(stdout);                                                     \
            }                                                                       \
            check_case_failed = 1;                                                  \
        }                                                                           \
    } while (0)

static inline int check_exit(void) { return check_failed_cases ? 1 : 0; }

#endif
