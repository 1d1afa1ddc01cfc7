#ifndef SHARESYNC_CZLIB_H
#define SHARESYNC_CZLIB_H

// zlib itself, for what compress-nio does not expose (deflateSetDictionary, used by ShareSyncWire's
// DeflaterPool). `deflateInit2` is a macro, so it is wrapped here.
#include <zlib.h>

static inline int CZlib_deflateInit2(z_streamp strm, int level, int windowBits, int memLevel) {
    return deflateInit2(strm, level, Z_DEFLATED, windowBits, memLevel, Z_DEFAULT_STRATEGY);
}

#endif
