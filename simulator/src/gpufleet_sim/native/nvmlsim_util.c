/*
 * nvmlsim_util.c - JSON access helpers, string copies and SHA-1 (for uuid5 MIG device UUIDs).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvmlsim.h"

cJSON *sim_jpath(const cJSON *obj, const char *path)
{
    char key[128];
    const cJSON *cur = obj;
    const char *p = path;

    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof(key))
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        if (!cJSON_IsObject(cur))
            return NULL;
        cur = cJSON_GetObjectItemCaseSensitive(cur, key);
        p = dot ? dot + 1 : p + n;
    }
    return (cJSON *)cur;
}

int sim_jnum(const cJSON *obj, const char *path, double *out)
{
    const cJSON *item = sim_jpath(obj, path);
    if (cJSON_IsNumber(item)) {
        *out = item->valuedouble;
        return 1;
    }
    if (cJSON_IsBool(item)) {
        *out = cJSON_IsTrue(item) ? 1.0 : 0.0;
        return 1;
    }
    return 0;
}

long long sim_jint(const cJSON *obj, const char *path, long long def)
{
    double v;
    return sim_jnum(obj, path, &v) ? (long long)v : def;
}

const char *sim_jstr(const cJSON *obj, const char *path)
{
    const cJSON *item = sim_jpath(obj, path);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

int sim_jbool(const cJSON *obj, const char *path, int def)
{
    double v;
    return sim_jnum(obj, path, &v) ? v != 0.0 : def;
}

void sim_jset_num(cJSON *obj, const char *key, double value)
{
    cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsNumber(item)) {
        cJSON_SetNumberValue(item, value);
        return;
    }
    if (item)
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    cJSON_AddNumberToObject(obj, key, value);
}

nvmlReturn_t sim_get_u32(const cJSON *obj, const char *path, unsigned int *out)
{
    double v;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!sim_jnum(obj, path, &v))
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned int)(long long)v;
    return NVML_SUCCESS;
}

nvmlReturn_t sim_copy_str(const char *src, char *buf, unsigned int length)
{
    size_t n;
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!src)
        return NVML_ERROR_NOT_SUPPORTED;
    n = strlen(src);
    if (length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, src, n + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------------------------ SHA-1 */

static uint32_t rol32(uint32_t v, int n)
{
    return (v << n) | (v >> (32 - n));
}

static void sha1_block(uint32_t h[5], const unsigned char *blk)
{
    uint32_t w[80], a, b, c, d, e;
    int i;

    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] << 24 | (uint32_t)blk[4 * i + 1] << 16 | (uint32_t)blk[4 * i + 2] << 8 |
               (uint32_t)blk[4 * i + 3];
    for (i = 16; i < 80; i++)
        w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    a = h[0];
    b = h[1];
    c = h[2];
    d = h[3];
    e = h[4];
    for (i = 0; i < 80; i++) {
        uint32_t f, k, t;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999U;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1U;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDCU;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6U;
        }
        t = rol32(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol32(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void sim_sha1(const unsigned char *data, size_t len, unsigned char out[20])
{
    uint32_t h[5] = {0x67452301U, 0xEFCDAB89U, 0x98BADCFEU, 0x10325476U, 0xC3D2E1F0U};
    unsigned char tail[128];
    size_t full = len / 64 * 64, rest = len - full, tail_len;
    unsigned long long bits = (unsigned long long)len * 8ULL;
    size_t i;

    for (i = 0; i < full; i += 64)
        sha1_block(h, data + i);
    memset(tail, 0, sizeof(tail));
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
    for (i = 0; i < 8; i++)
        tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (i = 0; i < tail_len; i += 64)
        sha1_block(h, tail + i);
    for (i = 0; i < 5; i++) {
        out[4 * i] = (unsigned char)(h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(h[i] >> 8);
        out[4 * i + 3] = (unsigned char)h[i];
    }
}
