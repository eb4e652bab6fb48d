package agui

// JournalName is journalName, for tests that look at the store.
var JournalName = journalName
