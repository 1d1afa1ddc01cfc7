import Foundation
import ShareSyncCore
import ShareSyncNode

/// How a ``Container`` reaches its node: in process, or through a daemon's control socket.
///
/// Both send the same ``ControlRequest`` lines to the same ``ControlHandler`` and read the same
/// responses, so an app behaves the same whichever it uses (and the CLI, which speaks the socket, too).
enum Transport: Sendable {
    /// The node runs in this process.
    case embedded(RunningNode)
    /// A `sharesync run` daemon answers on its control socket.
    case connected(ControlClient)
    /// The container was closed.
    case closed

    static let closedError = ShareSyncError(.serviceUnavailable, "the container was closed: open it again to use its node")

    /// Sends a request and decodes its result; a refusal throws the node's `ShareSyncError`.
    func call<T: Codable & Sendable>(_ request: ControlRequest, as type: T.Type = T.self) async throws(ShareSyncError) -> T {
        do {
            switch self {
            case .embedded(let node):
                guard !node.isStopped else { throw Self.closedError }
                let response = await node.respond(toLine: try request.line())
                return try ControlResponse<T>.result(of: response)
            case .connected(let client):
                return try await client.call(request, as: T.self)
            case .closed:
                throw Self.closedError
            }
        } catch let error as ControlError {
            throw error.shareSyncError
        } catch let error as ShareSyncError {
            throw error
        } catch let error as ControlClientError {
            switch error {
            case .unreachable: throw ShareSyncError(.serviceUnavailable, error.description, rule: .nodeNotRunning)
            case .malformedResponse: throw ShareSyncError(.networkFailure, error.description)
            }
        } catch is CancellationError {
            throw ShareSyncError(.operationCancelled, "the request was cancelled")
        } catch {
            throw ShareSyncError(.internalError, "cannot send the request: \(error)")
        }
    }
}
