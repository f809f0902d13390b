/* cc_split.h — compile a large generated program as parallel translation
 * units linked into one shared object (cc_split.c). */
#ifndef KILN_CC_SPLIT_H
#define KILN_CC_SPLIT_H

#include <stddef.h>

/* how many parts a source of src_len bytes is worth cutting into on a
 * machine with this many cores (1: compile it whole) */
int rt_cc_split_parts(size_t src_len, int cores);

/* compile src as nparts translation units at once with `cc flags -c` and
 * link them with `cc -shared` into out_so; temporary files are named
 * tmp_base.pN.{c,o} and removed. 0 on success; nonzero (nothing at out_so)
 * when the source cannot be cut or any step fails: compile it whole then. */
int rt_cc_split_build(const char *src, int nparts, const char *cc, const char *flags, const char *out_so,
                      const char *tmp_base);

/* wall seconds a build takes per byte of emitted C, learnt from this
 * process's compiles (cpu.c): the estimate of a program's recompile */
double rt_cc_seconds_per_byte(void);
/* 1 once a real compile of this process taught rt_cc_seconds_per_byte (its
 * rate then holds the machine's load at that time) */
int rt_cc_rate_learnt(void);
/* the rate for one model's program (key: rt_cc_program_key's, 0 for none):
 * what this process learnt if it compiled a program, else what an earlier
 * search remembered for that program, else rt_cc_seconds_per_byte */
double rt_cc_seconds_per_byte_for(unsigned long long key);
/* after a search's recompile: its seconds per unit byte over the machine's
 * slowdown measured then, remembered for this machine and compiler (a file
 * in the kernel cache), and for the program of that key (0: the machine's
 * only), the rate a later process starts from */
void rt_cc_rate_remember(double alone_rate, unsigned long long key);
/* the next compile on this thread (rt_cpu_compile) is a whole program's:
 * only such a build teaches the rate (a search's candidate units do not) */
void rt_cc_next_is_program(void);
/* the program (its source and the flags given with it) to build together
 * with the next program's build on this thread, as one unit (cc_pair.c):
 * that build's object then holds both, and a later rt_cpu_compile of the
 * companion finds it through an alias in the cache (kiln-<hash>.alias).
 * Consumed by that build; NULL clears it */
void rt_cc_companion(const char *src, const char *cflags);
/* the seconds the last rt_cpu_compile on this thread spent in the C
 * compiler (0 when the cache held the object) */
double rt_cc_last_seconds(void);
/* the seconds this thread's builds of pairs took since the last call (and
 * the last pair's unit bytes into *unit_bytes, may be NULL), then zero */
double rt_cc_paired_seconds(size_t *unit_bytes);

#endif
