#include "hashmap.h"

#define EMPTY (-1)
#define REMOVED (-2)

static size_t slot(int key) { return (size_t)key % HM_CAP; }

void hm_init(hashmap *m) {
    for (size_t i = 0; i < HM_CAP; i++) m->keys[i] = EMPTY;
    m->count = 0;
}

int hm_put(hashmap *m, int key, int val) {
    size_t i = slot(key);
    for (size_t n = 0; n < HM_CAP; n++, i = (i + 1) % HM_CAP) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
        if (m->keys[i] == EMPTY) {
            m->keys[i] = key;
            m->vals[i] = val;
            m->count++;
            return 0;
        }
    }
    return -1;
}

int hm_get(const hashmap *m, int key, int *val) {
    size_t i = slot(key);
    for (size_t n = 0; n < HM_CAP; n++, i = (i + 1) % HM_CAP) {
        if (m->keys[i] == EMPTY) return 0;
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return 1;
        }
    }
    return 0;
}

int hm_remove(hashmap *m, int key) {
    (void)m;
    (void)key;
    return 0; /* TODO: see SPEC.md */
}
