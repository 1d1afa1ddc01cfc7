import ArgumentParser
import Foundation

/// Syntax checks of what people type, before anything reaches the node.
enum Syntax {
    /// `local@domain.tld`: one `@`, no spaces, a domain of dot-separated labels with at least one dot.
    static func isEmailAddress(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[0].isEmpty, text.count <= 254,
            !text.contains(where: { $0.isWhitespace || $0.isNewline })
        else { return false }
        let labels = parts[1].split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2
            && labels.allSatisfy { label in
                !label.isEmpty && !label.hasPrefix("-") && !label.hasSuffix("-")
                    && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
            }
    }

    /// An optional `+`, then 5 to 20 digits, which spaces, dots, dashes and parentheses may separate.
    static func isPhoneNumber(_ text: String) -> Bool {
        var rest = Substring(text.trimmingCharacters(in: .whitespaces))
        if rest.hasPrefix("+") { rest = rest.dropFirst() }
        guard rest.allSatisfy({ ($0.isASCII && $0.isNumber) || " .-()".contains($0) }) else { return false }
        let digits = rest.filter { $0.isASCII && $0.isNumber }.count
        return (5...20).contains(digits)
    }

    /// Throws a usage error (exit 64) naming the option when an invitation address is malformed.
    static func checkInvitation(email: String?, phone: String?) throws {
        if let email, !isEmailAddress(email) {
            throw ValidationError("--email \(email.debugDescription) is not an email address (like bob@example.org)")
        }
        if let phone, !isPhoneNumber(phone) {
            throw ValidationError(
                "--phone \(phone.debugDescription) is not a phone number (digits, optionally a leading + and spaces, dots, dashes or parentheses)")
        }
    }
}
