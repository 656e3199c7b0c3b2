// libFuzzer target: the checkpoint manifest parser must reject or accept any
// input without crashing, and what it accepts must round-trip through its text.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "run/ckpt_manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    CkptManifest m;
    char err[256];
    if (ckpt_manifest_parse((const char *)data, size, &m, err, sizeof err) != 0) return 0;
    size_t len;
    char *text = ckpt_manifest_text(&m, &len);
    CkptManifest again;
    if (!text || ckpt_manifest_parse(text, len, &again, err, sizeof err) != 0) abort();
    if (again.num_pieces != m.num_pieces || again.num_files != m.num_files || again.step != m.step) abort();
    ckpt_manifest_free(&again);
    free(text);
    ckpt_manifest_free(&m);
    return 0;
}
