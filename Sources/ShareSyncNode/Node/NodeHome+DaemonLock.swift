#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import ShareSyncCore
import Synchronization

extension NodeHome {
    /// The lock file a running daemon holds (an exclusive `flock`) for its whole life.
    public static let daemonLockFileName = "daemon.lock"

    public var daemonLockPath: String { Self.join(path, Self.daemonLockFileName) }

    /// Takes the home's daemon lock: one daemon per home. Taken first by ``NodeService``, before any
    /// database is opened, any socket listens or any owner is contacted, and held until
    /// ``DaemonLock/release()`` (or the process ends: the kernel drops the lock of a dead process, so a
    /// crashed daemon leaves nothing to clean up).
    ///
    /// Throws ``ShareSyncError/Code/serviceUnavailable`` (rule `oneDaemonPerHome`) if another daemon
    /// holds it, ``ShareSyncError/Code/internalError`` if the lock file cannot be opened.
    public func lockForDaemon() throws(ShareSyncError) -> DaemonLock {
        let lockPath = daemonLockPath
        let fd = openLockFile(lockPath)
        guard fd >= 0 else {
            throw ShareSyncError(.internalError, "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let reason = errno
            close(fd)
            if reason == EWOULDBLOCK {
                throw ShareSyncError(
                    .serviceUnavailable, "a daemon is already running on \(path); stop it before starting another",
                    rule: .oneDaemonPerHome)
            }
            throw ShareSyncError(.internalError, "cannot lock \(lockPath): \(String(cString: strerror(reason)))")
        }
        return DaemonLock(descriptor: fd)
    }
}

/// A home's daemon lock (``NodeHome/lockForDaemon()``), held until ``release()``.
public final class DaemonLock: Sendable {
    private let descriptor: Mutex<Int32?>

    init(descriptor: Int32) { self.descriptor = Mutex(descriptor) }

    /// Releases the lock; another daemon may then start on the home. Releasing twice does nothing.
    public func release() {
        guard let fd = descriptor.withLock({ d -> Int32? in defer { d = nil }; return d }) else { return }
        close(fd)
    }

    deinit { release() }
}

/// `open(2)` of a lock file (outside ``NodeHome``, whose own `open` would hide it).
private func openLockFile(_ path: String) -> Int32 {
    open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
}
