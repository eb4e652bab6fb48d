package conversation

// Key opens a React's conversation to be stored a part at a time
// (agent.React.Parts). Only deputy's own packages can name it, so the
// parts stay plumbing of subagent.WithStore rather than a method a user of
// the loop sees.
type Key struct{ _ byte }

// Parts is a conversation that can be stored a part at a time: a store
// appends what each run added instead of writing the whole.
type Parts interface {
	// Mark returns how many messages the conversation holds, and an
	// epoch that changes whenever it changes other than at its end
	// (compaction, Restore, Reset, rollback): while it stays,
	// SnapshotFrom(n) is what was added since.
	Mark() (epoch uint64, n int)
	// SnapshotFrom returns the messages after the first n, as a part
	// that RestoreParts takes after a Snapshot.
	SnapshotFrom(n int) ([]byte, error)
	// RestoreParts replaces the conversation with the messages of parts,
	// a Snapshot then SnapshotFrom's parts, checked as Restore does.
	RestoreParts(parts ...[]byte) error
	// AppendParts adds the messages of SnapshotFrom's parts at the
	// conversation's end (what another process added), the epoch kept.
	AppendParts(parts ...[]byte) error
}
