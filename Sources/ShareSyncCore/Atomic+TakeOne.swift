import Synchronization

extension Atomic where Value == Int {
    /// Takes one from a count of things still to do (the failures and lost answers tests inject):
    /// true, and one less, if the count was above zero; false, and the count unchanged, otherwise.
    package func takeOne() -> Bool {
        var current = load(ordering: .relaxed)
        while current > 0 {
            let (exchanged, original) = compareExchange(expected: current, desired: current - 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }
}
