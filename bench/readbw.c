/* Memory read bandwidth: T threads each sum their share of a buffer of
 * SIZE MiB (AVX2 loads, 4 independent accumulators), R rounds; prints the
 * best and median rounds in GB/s (10^9 bytes).
 *
 *   cc -O2 -mavx2 -pthread bench/readbw.c -o readbw && ./readbw [T] [SIZE_MiB] [R]
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *buf;
static size_t n_floats;
static int n_threads;
static pthread_barrier_t bar;
static volatile float sink[64];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
    long id = (long)arg;
    size_t per = n_floats / n_threads / 32 * 32;
    const float *p = buf + per * id;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    pthread_barrier_wait(&bar);
    for (size_t i = 0; i < per; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    sink[id] = out[0];
    pthread_barrier_wait(&bar);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    n_threads = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 2048;
    int rounds = argc > 3 ? atoi(argv[3]) : 7;
    if (n_threads < 1 || n_threads > 64 || rounds < 1 || rounds > 100) return 2;
    n_floats = mib * 1024 * 1024 / 4;
    buf = aligned_alloc(64, n_floats * 4);
    if (!buf) return 1;
    for (size_t i = 0; i < n_floats; i++) buf[i] = (float)(i & 1023);
    double gbs[100];
    pthread_t th[64];
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_init(&bar, NULL, n_threads + 1);
        for (long t = 0; t < n_threads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
        pthread_barrier_wait(&bar);
        double t0 = now();
        pthread_barrier_wait(&bar);
        double dt = now() - t0;
        for (int t = 0; t < n_threads; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&bar);
        size_t bytes = n_floats / n_threads / 32 * 32 * n_threads * 4;
        gbs[r] = bytes / dt / 1e9;
    }
    qsort(gbs, rounds, sizeof(double), cmp);
    printf("threads %d, %zu MiB, %d rounds: best %.2f GB/s, median %.2f GB/s\n", n_threads, mib,
           rounds, gbs[rounds - 1], gbs[rounds / 2]);
    return 0;
}
