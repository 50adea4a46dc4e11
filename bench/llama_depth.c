/* llama.cpp's decode speed at depth N without its N-token prefill.
 *
 * llama-bench -d N prefills N real tokens first (hours at 128K on 2 cores).
 * This creates a context of n_ctx = N + 64 (flash attention, a K/V cache of
 * the given type, f16 by default as llama.cpp's), decodes 4 tokens, reads
 * the sequence's state (llama_state_seq_get_data), rewrites its KV part to
 * N cells at positions 0..N-1 holding random values of the cache's type
 * (keeping the recurrent part as it is), loads it back
 * (llama_state_seq_set_data), decodes one token as a warm-up and times 16
 * more with llama_decode, as llama-bench's tg16. Prints tokens per second.
 *
 * Build against a llama.cpp build (headers in include/ and ggml/include/,
 * libllama.so in build/bin):
 *   cc -O2 bench/llama_depth.c -I$L/include -I$L/ggml/include -L$L/build/bin \
 *      -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o llama_depth
 *   ./llama_depth MODEL.gguf DEPTH [THREADS] [f16|q8_0|f32] [REPS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A reader over the state bytes. */
typedef struct {
    const uint8_t *p;
    size_t at, n;
} rd_t;

static int take(rd_t *r, void *out, size_t k) {
    if (r->at + k > r->n) return -1;
    if (out) memcpy(out, r->p + r->at, k);
    r->at += k;
    return 0;
}

/* A growing output buffer. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} wr_t;

static void put(wr_t *w, const void *src, size_t k) {
    if (w->n + k > w->cap) {
        w->cap = (w->n + k) * 2;
        w->p = realloc(w->p, w->cap);
        if (!w->p) { fprintf(stderr, "out of memory\n"); exit(1); }
    }
    if (src) memcpy(w->p + w->n, src, k); else memset(w->p + w->n, 0, k);
    w->n += k;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* `n` bytes of rows of the type: values of magnitude < 1 (f16: sign,
 * exponent 2^-8..2^-1; f32 likewise; q8_0 blocks: scale 1/127 as f16, any
 * bytes). */
static void random_rows(wr_t *w, int32_t type, size_t n) {
    size_t at = w->n;
    put(w, NULL, n);
    uint8_t *p = w->p + at;
    if (type == GGML_TYPE_F16) {
        for (size_t i = 0; i + 2 <= n; i += 2) {
            uint32_t r = next_u32();
            uint16_t h = (uint16_t)(((r & 1) << 15) | ((7 + (r >> 1) % 8) << 10) | ((r >> 4) & 0x3FF));
            memcpy(p + i, &h, 2);
        }
    } else if (type == GGML_TYPE_F32) {
        for (size_t i = 0; i + 4 <= n; i += 4) {
            float f = ((float)(next_u32() % 2000000) / 1e6f) - 1.0f;
            memcpy(p + i, &f, 4);
        }
    } else if (type == GGML_TYPE_Q8_0) {
        for (size_t i = 0; i + 34 <= n; i += 34) {
            uint16_t d = 0x2008; /* about 1/127 */
            memcpy(p + i, &d, 2);
            for (int j = 0; j < 32; j++) p[i + 2 + j] = (uint8_t)next_u32();
        }
    } else {
        fprintf(stderr, "cache type %d not handled\n", type);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL DEPTH [THREADS] [f16|q8_0|f32] [REPS]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    long depth = atol(argv[2]);
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    const char *ty = argc > 4 ? argv[4] : "f16";
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    enum ggml_type kvt = !strcmp(ty, "q8_0") ? GGML_TYPE_Q8_0 : !strcmp(ty, "f32") ? GGML_TYPE_F32 : GGML_TYPE_F16;
    if (depth < 8 || threads < 1 || reps < 1 || reps > 3) return 2;

    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) { fprintf(stderr, "%s: load failed\n", path); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)((depth + 64 + 255) / 256 * 256);
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    cp.type_k = kvt;
    cp.type_v = kvt;
    cp.no_perf = 1;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "context failed\n"); return 1; }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    /* A few real tokens, to learn the state's layout. */
    llama_token toks[4] = {1, 2 % n_vocab, 3 % n_vocab, 4 % n_vocab};
    if (llama_decode(ctx, llama_batch_get_one(toks, 4))) { fprintf(stderr, "decode failed\n"); return 1; }
    size_t sz = llama_state_seq_get_size(ctx, 0);
    uint8_t *st = malloc(sz);
    if (!st || llama_state_seq_get_data(ctx, st, sz, 0) != sz) { fprintf(stderr, "get state failed\n"); return 1; }

    if (getenv("LLAMA_DEPTH_DUMP")) {
        for (size_t i = 0; i < 96 && i < sz; i++) fprintf(stderr, "%02x%s", st[i], i % 16 == 15 ? "\n" : " ");
        fprintf(stderr, "(%zu bytes)\n", sz);
    }
    rd_t r = {st, 0, sz};
    wr_t w = {NULL, 0, 0};
    uint32_t n_stream, cells;
    /* This build writes 8 bytes before the KV part (not in the source
     * read for the layout): copied as they are. */
    uint64_t head;
    if (take(&r, &head, 8)) return 1;
    put(&w, &head, 8);
    if (take(&r, &n_stream, 4) || n_stream != 1) { fprintf(stderr, "n_stream %u\n", n_stream); return 1; }
    if (take(&r, &cells, 4) || cells != 4) { fprintf(stderr, "cells %u\n", cells); return 1; }
    put(&w, &n_stream, 4);
    uint32_t n_new = (uint32_t)depth;
    put(&w, &n_new, 4);
    /* Meta: pos, n_seq_id (1), seq id 0 per cell. */
    for (uint32_t i = 0; i < cells; i++) {
        int32_t pos; uint32_t ns; int32_t sid;
        if (take(&r, &pos, 4) || take(&r, &ns, 4) || ns != 1 || take(&r, &sid, 4)) { fprintf(stderr, "meta\n"); return 1; }
    }
    for (uint32_t i = 0; i < n_new; i++) {
        int32_t pos = (int32_t)i, sid = 0;
        uint32_t ns = 1;
        put(&w, &pos, 4); put(&w, &ns, 4); put(&w, &sid, 4);
    }
    uint32_t v_trans, n_layer;
    if (take(&r, &v_trans, 4) || take(&r, &n_layer, 4)) return 1;
    if (v_trans) { fprintf(stderr, "transposed V (flash attention off?)\n"); return 1; }
    put(&w, &v_trans, 4); put(&w, &n_layer, 4);
    for (int part = 0; part < 2; part++) { /* keys, then values */
        for (uint32_t l = 0; l < n_layer; l++) {
            int32_t t; uint64_t row;
            if (take(&r, &t, 4) || take(&r, &row, 8) || take(&r, NULL, row * cells)) { fprintf(stderr, "layer %u\n", l); return 1; }
            put(&w, &t, 4); put(&w, &row, 8);
            random_rows(&w, t, row * n_new);
        }
    }
    /* The recurrent part as it is, its cell moved to the last position. */
    size_t rec_at = r.at;
    uint32_t rc;
    int32_t rpos;
    if (take(&r, &rc, 4) || rc != 1 || take(&r, &rpos, 4)) { fprintf(stderr, "recurrent part\n"); return 1; }
    rpos = (int32_t)n_new - 1;
    put(&w, &rc, 4);
    put(&w, &rpos, 4);
    put(&w, r.p + r.at, r.n - r.at);
    r.at = rec_at;
    double kv_bytes = (double)(w.n - 12.0 * n_new - (r.n - r.at) - 8);

    llama_memory_clear(llama_get_memory(ctx), 1);
    if (llama_state_seq_set_data(ctx, w.p, w.n, 0) != w.n) { fprintf(stderr, "set state failed\n"); return 1; }
    llama_pos pmax = llama_memory_seq_pos_max(llama_get_memory(ctx), 0);
    fprintf(stderr, "state: %u cells, %.1f MiB of KV, last position %d\n", n_new, kv_bytes / 1048576.0, pmax);
    if (pmax != (llama_pos)(n_new - 1)) return 1;

    for (int rep = 0; rep < reps; rep++) {
        /* Repetitions go on from where the last one ended (17 tokens
         * each; n_ctx leaves room for 3). */
        llama_token t = 5 % n_vocab;
        if (llama_decode(ctx, llama_batch_get_one(&t, 1))) return 1; /* warm-up */
        double t0 = now();
        for (int i = 0; i < 16; i++) {
            t = (llama_token)((7 + i) % n_vocab);
            if (llama_decode(ctx, llama_batch_get_one(&t, 1))) { fprintf(stderr, "decode at %d failed\n", i); return 1; }
            llama_synchronize(ctx);
        }
        double dt = now() - t0;
        printf("llama.cpp depth %ld, K/V %s, %d threads: tg16 %.3f t/s\n", depth, ty, threads, 16.0 / dt);
        fflush(stdout);
    }
    free(st); free(w.p);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
