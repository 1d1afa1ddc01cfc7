// glibc's allocator controls (`mallopt`), which the Glibc module does not export: the daemon's
// allocator settings (Sources/ShareSyncNode/Node/AllocatorTuning.swift).
#if defined(__linux__)
#include <malloc.h>
#endif
