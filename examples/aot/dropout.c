/* Calls the ahead-of-time compiled dropout (dropout.o, dropout.h from `kiln aot dropout.kir`)
 * for two training steps and once for inference, and prints how many elements each kept.
 *
 *     ./dropout
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dropout.h"

static int kept(const float *y) {
    int n = 0;
    for (int i = 0; i < 32; i++) n += y[i] != 0.0f;
    return n;
}

int main(void) {
    float x[32], y[32];
    /* The branches' intermediate values live in a caller-provided scratch area. */
    void *scratch = aligned_alloc(DROPOUT_SCRATCH_ALIGN, DROPOUT_SCRATCH_BYTES);
    if (!scratch) return 1;
    for (int i = 0; i < 32; i++) x[i] = 1.0f + (float)i;
    for (int64_t step = 0; step < 2; step++) {
        uint8_t training = 1;
        dropout(&training, &step, x, y, scratch);
        printf("training step %lld: kept %d of 32, y[0] = %g\n", (long long)step, kept(y), y[0]);
    }
    uint8_t training = 0;
    int64_t step = 2;
    dropout(&training, &step, x, y, scratch);
    printf("inference: kept %d of 32, y[31] = %g\n", kept(y), y[31]);
    free(scratch);
    return 0;
}
