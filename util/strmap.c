#include "util/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

static uint64_t hash_bytes(const char *key, size_t len) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
    return h;
}

void strmap_init(StrMap *map, size_t expected_count) {
    size_t capacity = 16;
    while (capacity < 2 * expected_count) capacity *= 2;
    map->keys = xcalloc(capacity, sizeof(char *));
    map->lens = xcalloc(capacity, sizeof(size_t));
    map->values = xcalloc(capacity, sizeof(int));
    map->capacity = capacity;
    map->count = 0;
}

void strmap_free(StrMap *map) {
    for (size_t i = 0; i < map->capacity; i++) free(map->keys[i]);
    free(map->keys);
    free(map->lens);
    free(map->values);
    memset(map, 0, sizeof *map);
}

static size_t find_slot(const StrMap *map, const char *key, size_t len) {
    size_t i = hash_bytes(key, len) & (map->capacity - 1);
    while (map->keys[i] && !(map->lens[i] == len && memcmp(map->keys[i], key, len) == 0))
        i = (i + 1) & (map->capacity - 1);
    return i;
}

static void grow(StrMap *map) {
    StrMap bigger;
    strmap_init(&bigger, map->capacity);
    for (size_t i = 0; i < map->capacity; i++) {
        if (!map->keys[i]) continue;
        size_t slot = find_slot(&bigger, map->keys[i], map->lens[i]);
        bigger.keys[slot] = map->keys[i];
        bigger.lens[slot] = map->lens[i];
        bigger.values[slot] = map->values[i];
        bigger.count++;
        map->keys[i] = NULL;
    }
    strmap_free(map);
    *map = bigger;
}

void strmap_put(StrMap *map, const char *key, size_t len, int value) {
    if (2 * (map->count + 1) > map->capacity) grow(map);
    size_t slot = find_slot(map, key, len);
    if (!map->keys[slot]) {
        map->keys[slot] = xmalloc(len + 1);
        memcpy(map->keys[slot], key, len);
        map->keys[slot][len] = '\0';
        map->lens[slot] = len;
        map->count++;
    }
    map->values[slot] = value;
}

int strmap_get(const StrMap *map, const char *key, size_t len) {
    size_t slot = find_slot(map, key, len);
    return map->keys[slot] ? map->values[slot] : -1;
}
