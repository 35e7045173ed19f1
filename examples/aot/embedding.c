/* Calls the embedding lookup compiled ahead of time from embedding.kir, then calls it again
 * with an id out of range: the entry point returns the failing step's code instead of reading
 * outside the table, and embedding_error() says what it means.
 *
 *     make -C examples/aot embedding
 */
#include <stdio.h>
#include <stdlib.h>
#include "embedding.h"

int main(void) {
    static float table[50 * 8], w[8 * 3], scores[4 * 3];
    int32_t ids[4 * 6];
    /* The lookup's rows and their sums live in a caller-provided scratch area. */
    void *scratch = aligned_alloc(EMBEDDING_SCRATCH_ALIGN, EMBEDDING_SCRATCH_BYTES);
    if (!scratch) return 1;
    for (int i = 0; i < 50 * 8; i++) table[i] = (float)(i % 17) / 16.0f - 0.5f;
    for (int i = 0; i < 8 * 3; i++) w[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 4 * 6; i++) ids[i] = (i * 7) % 50 - (i % 3 == 0 ? 50 : 0);

    int32_t code = embedding(table, ids, w, scores, scratch);
    if (code != 0) {
        fprintf(stderr, "unexpected failure %d: %s\n", code, embedding_error(code));
        return 1;
    }
    printf("scores of sentence 0: %g %g %g\n", scores[0], scores[1], scores[2]);

    ids[5] = 50; /* one past the last row */
    code = embedding(table, ids, w, scores, scratch);
    printf("with id 50: code %d: %s\n", code, embedding_error(code));
    free(scratch);
    return code == 1 ? 0 : 1;
}
