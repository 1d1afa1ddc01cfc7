import Foundation
import Testing

import ShareSyncCore
@testable import ShareSyncStore

@Suite("Epochs of a database's history")
struct PositionEpochsTests {
    typealias Position = ServerChangeToken.Position

    @Test("a position holds if its epoch is the database's and it does not point past where the next epoch began")
    func holds() {
        // Epoch 0 (before epochs) up to 10, epoch 7 from 10 to 25, epoch 9 from 25 on.
        let epochs = PositionEpochs(text: "7:10,9:25")
        #expect(epochs.text == "7:10,9:25")
        #expect(epochs.holds(Position(sequence: 10, epoch: 0)))
        #expect(!epochs.holds(Position(sequence: 11, epoch: 0)))
        #expect(epochs.holds(Position(sequence: 3, epoch: 7)))  // a fetch from an older token, paged in epoch 7
        #expect(epochs.holds(Position(sequence: 25, epoch: 7)))
        #expect(!epochs.holds(Position(sequence: 26, epoch: 7)))  // a copy restored within epoch 7 ended it at 25
        #expect(!epochs.holds(Position(sequence: 20, scanSnapshot: 26, epoch: 7)))
        #expect(epochs.holds(Position(sequence: 1_000, epoch: 9)))  // the current one: "ahead" is checked apart
        #expect(!epochs.holds(Position(sequence: 12, epoch: 8)))  // a history this database does not have
        #expect(epochs.holds(Position(sequence: 30)))  // made now
    }

    @Test("a position is sealed in the last epoch begun before it, so that an epoch begun later never changes its token")
    func sealingEpoch() throws {
        // Epoch 7 from 10, epoch 9 from 25, and epoch 4 also from 25 (an opening whose writes were all refused).
        var epochs = PositionEpochs(text: "7:10,9:25,4:25")
        #expect(epochs.epoch(sealing: Position(sequence: 0)) == 0)
        #expect(epochs.epoch(sealing: Position(sequence: 10)) == 0)
        #expect(epochs.epoch(sealing: Position(sequence: 11)) == 7)
        #expect(epochs.epoch(sealing: Position(sequence: 25)) == 7)
        #expect(epochs.epoch(sealing: Position(sequence: 26)) == 4)
        #expect(epochs.epoch(sealing: Position(sequence: 3, scanSnapshot: 26)) == 4)  // a page of a scan holds both
        for sequence in Int64(0)...40 {
            let position = Position(sequence: sequence)
            var sealed = position
            sealed.epoch = epochs.epoch(sealing: position)
            #expect(epochs.holds(sealed), "\(sealed)")
        }
        // Beginning an epoch at 40 changes no position up to 40; the key's tokens are the same text.
        let cipher = try PositionCipher(hex: PositionCipher.newKeyHex())
        let before = try (0...40).map { try EpochSealing(cipher: cipher, epochs: epochs).seal(Position(sequence: $0)) }
        let fresh = epochs.begin(at: 40)
        #expect(try (0...40).map { try EpochSealing(cipher: cipher, epochs: epochs).seal(Position(sequence: $0)) } == before)
        #expect(epochs.epoch(sealing: Position(sequence: 41)) == fresh)
        #expect(try cipher.open(Substring(EpochSealing(cipher: cipher, epochs: epochs).seal(Position(sequence: 41)))).epoch == fresh)
    }

    @Test("a new epoch is random, not 0, not one already used, and kept in the text")
    func begin() {
        var epochs = PositionEpochs(text: "")
        var seen: Set<UInt16> = [0]
        for i in 0..<50 {
            let epoch = epochs.begin(at: Int64(i))
            #expect(!seen.contains(epoch))
            seen.insert(epoch)
        }
        #expect(PositionEpochs(text: epochs.text).text == epochs.text)
        #expect(PositionEpochs(text: "garbage,1:x,3:4").text == "3:4")
    }
}
