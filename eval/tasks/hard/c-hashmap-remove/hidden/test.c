#include <stdio.h>
#include "hashmap.h"

static int fails = 0;
#define CHECK(c) do { if (!(c)) { printf("failed: %s (line %d)\n", #c, __LINE__); fails++; } } while (0)

int main(void) {
    hashmap m;
    int v;
    hm_init(&m);
    /* 1, 17 and 33 share a probe sequence. */
    CHECK(hm_put(&m, 1, 10) == 0);
    CHECK(hm_put(&m, 17, 170) == 0);
    CHECK(hm_put(&m, 33, 330) == 0);
    CHECK(m.count == 3);
    CHECK(hm_remove(&m, 17) == 1);
    CHECK(m.count == 2);
    CHECK(hm_get(&m, 17, &v) == 0);
    CHECK(hm_get(&m, 33, &v) == 1 && v == 330);
    CHECK(hm_remove(&m, 17) == 0);
    CHECK(hm_remove(&m, 99) == 0);
    CHECK(hm_put(&m, 33, 331) == 0);
    CHECK(hm_remove(&m, 33) == 1);
    CHECK(hm_get(&m, 33, &v) == 0);
    CHECK(m.count == 1);
    /* Fill, empty, fill again. */
    hm_init(&m);
    for (int k = 0; k < HM_CAP; k++) CHECK(hm_put(&m, k * 3, k) == 0);
    CHECK(hm_put(&m, 1000, 1) == -1);
    for (int k = 0; k < HM_CAP; k++) CHECK(hm_remove(&m, k * 3) == 1);
    CHECK(m.count == 0);
    for (int k = 0; k < HM_CAP; k++) CHECK(hm_put(&m, k * 5 + 1, k) == 0);
    for (int k = 0; k < HM_CAP; k++) CHECK(hm_get(&m, k * 5 + 1, &v) == 1 && v == k);
    CHECK(m.count == HM_CAP);
    return fails != 0;
}
