import Foundation
#if canImport(Glibc)
import Glibc
#endif
// TEMPORARY tracing, not to be committed.
nonisolated(unsafe) let traceFile: UnsafeMutablePointer<FILE>? = {
    guard let p = getenv("SHARESYNC_TRACE") else { return nil }
    return fopen(String(cString: p) + ".\(getpid())", "w")
}()
@inline(__always) func trace(_ what: StaticString, _ n: Int = 0) {
    guard let f = traceFile else { return }
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    let us = Int(ts.tv_sec) * 1_000_000 + Int(ts.tv_nsec) / 1000
    flockfile(f)
    fputs("\(us) \(what) \(n)\n", f)
    funlockfile(f)
}
