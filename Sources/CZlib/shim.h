#ifndef SHARESYNC_CZLIB_H
#define SHARESYNC_CZLIB_H

// zlib itself, for what compress-nio does not expose (deflateSetDictionary and inflateSetDictionary: ShareSyncWire's
// ZlibStreams.swift). `deflateInit2` and `inflateInit2` are macros, so they are wrapped here.
#include <zlib.h>

static inline int CZlib_deflateInit2(z_streamp strm, int level, int windowBits, int memLevel) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}

static inline int CZlib_inflateInit2(z_streamp strm, int windowBits) {
    return inflateInit2(strm, windowBits);
}

#endif
