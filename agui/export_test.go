package agui

// JournalName is the name of the journal of run runID on owner's thread
// threadID, for tests that look at the store.
func JournalName(owner, threadID, runID string) string {
	return thread{owner, threadID}.journalName(runID)
}

// ThreadKey is the store key of owner's thread threadID's conversation,
// for benchmarks that fill a store quickly.
func ThreadKey(owner, threadID string) string { return thread{owner, threadID}.key() }
