import Foundation
import ShareSyncCore

#if canImport(Glibc)
import Glibc
#endif

/// Writes the small files of a node home (the identity key, the settings) so that a crash or a power
/// loss leaves either the old file or the new one, never a truncated or empty one, and so that a
/// written file is on the disk when the call returns.
///
/// The bytes go to `<path>.tmp` (created with the file's mode, so they are never readable by others),
/// which is synced, then renamed over `path` (`rename(2)` replaces atomically: there is no moment
/// without a file), and the folder is synced so the rename itself is on the disk. Before, the
/// settings were rewritten in place (a crash between the truncation and the write left a file the
/// node cannot start with), and the key was written without a sync and its old file removed before
/// the new one took its name.
package enum DurableFile {
    /// Replaces (or creates) the file at `path` with `data`, mode `mode`. On failure the file at
    /// `path` is as it was; the error names the file and what failed.
    package static func write(_ data: Data, to path: String, mode: mode_t = 0o600) throws(ShareSyncError) {
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw failure("cannot create \(tmp)", path) }
        var closed = false
        defer {
            if !closed { close(fd) }
        }
        // An existing temporary file (an earlier write that crashed) keeps its mode through O_CREAT.
        guard fchmod(fd, mode) == 0 else { throw failure("cannot set the mode of \(tmp)", path, removing: tmp) }
        let written = data.withUnsafeBytes { bytes -> Bool in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += n
            }
            return true
        }
        guard written else { throw failure("cannot write \(tmp)", path, removing: tmp) }
        guard fsync(fd) == 0 else { throw failure("cannot sync \(tmp) to the disk", path, removing: tmp) }
        closed = true
        guard close(fd) == 0 else { throw failure("cannot close \(tmp)", path, removing: tmp) }
        guard rename(tmp, path) == 0 else { throw failure("cannot rename \(tmp) to \(path)", path, removing: tmp) }
        try syncFolder(of: path)
    }

    /// Syncs the folder holding `path`, so a file created or renamed in it is found after a power loss.
    /// Called once the new file has its name: a failure says so.
    private static func syncFolder(of path: String) throws(ShareSyncError) {
        let folder = (path as NSString).deletingLastPathComponent
        let fd = open(folder.isEmpty ? "." : folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw failure("\(path) is written, but the folder \(folder) cannot be opened to sync it", path, replaced: true) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw failure("\(path) is written, but the folder \(folder) cannot be synced to the disk", path, replaced: true) }
    }

    /// The error of a failed step, with the system's reason; removes the temporary file if given.
    /// Before the rename, it says that the file at `path` (if there is one) is unchanged.
    private static func failure(_ what: String, _ path: String, removing tmp: String? = nil, replaced: Bool = false) -> ShareSyncError {
        let reason = String(cString: strerror(errno))
        if let tmp { unlink(tmp) }
        let kept = !replaced && FileManager.default.fileExists(atPath: path) ? "; \(path) is unchanged" : ""
        return ShareSyncError(.internalError, "\(what): \(reason)\(kept)")
    }
}
