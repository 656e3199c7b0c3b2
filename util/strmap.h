// strmap.h: a string -> int hash map (open addressing, linear probing), used by
// the BPE tokenizer for its vocabulary and its merge ranks.
#ifndef SHARDLAB_STRMAP_H
#define SHARDLAB_STRMAP_H

#include <stddef.h>

typedef struct {
    char **keys;    // (capacity) owned copies, NULL for empty slots
    size_t *lens;   // (capacity)
    int *values;    // (capacity)
    size_t capacity, count;
} StrMap;

void strmap_init(StrMap *map, size_t expected_count);
void strmap_free(StrMap *map);
// Inserts or overwrites key[0..len).
void strmap_put(StrMap *map, const char *key, size_t len, int value);
// Returns the value, or -1 when the key is absent.
int strmap_get(const StrMap *map, const char *key, size_t len);

#endif
