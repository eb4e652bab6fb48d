package agui

// JournalName is the name of the journal of run runID on owner's thread
// threadID, for tests that look at the store.
func JournalName(owner, threadID, runID string) string {
	return thread{owner, threadID}.journalName(runID)
}
