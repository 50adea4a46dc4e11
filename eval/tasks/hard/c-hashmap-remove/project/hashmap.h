#ifndef HASHMAP_H
#define HASHMAP_H
#include <stddef.h>

/* A fixed-capacity map from non-negative int keys to int values, open addressing with linear probing. */
#define HM_CAP 16
typedef struct {
    int keys[HM_CAP];   /* -1: never used; -2: removed (see SPEC.md) */
    int vals[HM_CAP];
    size_t count;
} hashmap;

void hm_init(hashmap *m);
int hm_put(hashmap *m, int key, int val);        /* 0 ok, -1 full */
int hm_get(const hashmap *m, int key, int *val); /* 1 found, 0 not */
int hm_remove(hashmap *m, int key);              /* 1 removed, 0 not present */
#endif
