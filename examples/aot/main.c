/* Calls the ahead-of-time compiled W1 (w1.o, w1.h from `kiln aot w1.kir`), checks it against a
 * double-precision reference and times it on this thread. No kiln at run time: just the object
 * and libm.
 *
 *     ./main [runs]
 */
#define _POSIX_C_SOURCE 200112L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "w1.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Standard normal numbers (as the JIT benchmark's W1 uses), by Box-Muller from a linear
 * congruential generator. */
static double uniform(unsigned long long *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((*s >> 11) + 0.5) / 9007199254740992.0;
}

static void fill_normal(float *a, size_t n, unsigned long long *s) {
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform(s))), t = 6.283185307179586 * uniform(s);
        a[i] = (float)(r * cos(t));
        if (i + 1 < n) a[i + 1] = (float)(r * sin(t));
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 15;
    if (runs < 1) runs = 1;
    size_t n = W1_X_ELEMS;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *out = malloc(n * sizeof *out);
    double *ms = malloc(runs * sizeof *ms);
    if (!x || !y || !out || !ms) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    unsigned long long seed = 42;
    fill_normal(x, n, &seed);
    fill_normal(y, n, &seed);
    w1(x, y, out); /* warm up (and fault the output pages in) */
    /* Error relative to the size of the two terms (they may cancel). */
    double worst = 0;
    for (size_t i = 0; i < n; i += 997) {
        double a = x[i], b = y[i];
        double p = exp(-a * a) * sin(b), q = 0.5 * a * b;
        double err = fabs(out[i] - (p + q)) / (fabs(p) + fabs(q) + 1e-30);
        if (err > worst) worst = err;
    }
    for (int r = 0; r < runs; r++) {
        double t = now_ms();
        w1(x, y, out);
        ms[r] = now_ms() - t;
    }
    qsort(ms, runs, sizeof *ms, cmp);
    printf("w1 ahead of time: %zu elements, median %.3f ms (min %.3f, max %.3f) over %d runs; "
           "max relative error %.1e\n",
           n, ms[runs / 2], ms[0], ms[runs - 1], runs, worst);
    free(x); free(y); free(out); free(ms);
    return worst < 1e-5 ? 0 : 1;
}
