package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/deputy-go/deputy/internal/jobtool"
	"github.com/deputy-go/deputy/internal/journal"
	"github.com/deputy-go/deputy/internal/mailbox"
	"github.com/deputy-go/deputy/internal/run"
	"github.com/deputy-go/deputy/internal/usage"
	"github.com/deputy-go/deputy/policy"
	"github.com/deputy-go/deputy/provider"
	"github.com/deputy-go/deputy/tool"
)

// A background child (subagent.WithBackground) runs with a mailbox: the
// messages its parent sends it wait there until the child's loop reaches
// a step boundary, before its next model call, and are added to its
// conversation as one user message, never during a model call or a tool
// call. Under a journal the messages a step took are recorded before its
// model is asked, so that the turn run again delivers the same messages
// before the same step, and a message sent again after a restart is known
// as delivered: each message reaches the child once.

// inboxKey is the journal key of the messages delivered before step.
func (j *runJournal) inboxKey(step int) string { return j.stepKey(step) + "/in" }

// deliver adds the messages waiting in the run's mailbox to its
// conversation, before the model call of step.
func (s *runState) deliver(step int) error {
	if step == 1 && s.box == nil && s.r.tools != nil && Depth(s.ctx) == 0 {
		if err := s.notes(); err != nil {
			return err
		}
	}
	if s.box == nil {
		return nil
	}
	s.box.Began(step)
	s.sent = s.sent[:0]
	key := ""
	if s.journal != nil {
		key = s.journal.inboxKey(step)
		if e, ok := s.journal.scope.J.Lookup(key); ok {
			var msgs []mailbox.Message
			if err := json.Unmarshal(e.Value, &msgs); err != nil {
				return fmt.Errorf("reading the messages delivered before step %d from the journal: %w", step, err)
			}
			s.box.Replayed(step, msgs)
			s.addInbound(msgs)
			return nil
		}
		if s.journal.has(s.journal.stepKey(step)) {
			return nil // the run that recorded the step delivered nothing before it
		}
	}
	msgs := s.box.Waiting()
	if len(msgs) == 0 {
		return nil
	}
	if key != "" {
		value, _ := json.Marshal(msgs) // strings only: it cannot fail
		if err := s.journal.scope.J.Record(context.WithoutCancel(s.ctx), key, journal.Entry{Value: value}); err != nil {
			return fmt.Errorf("recording the messages delivered before step %d in the journal: %w: resume the turn when the store is back", step, err)
		}
	}
	s.box.Take(step, len(msgs))
	s.addInbound(msgs)
	if s.tracer != nil {
		for _, m := range msgs {
			if m.From.IsValid() {
				s.sent = append(s.sent, trace.Link{SpanContext: m.From, Attributes: []attribute.KeyValue{AttrMessageID.String(m.ID)}})
			}
		}
	}
	return nil
}

// addInbound adds delivered messages to the conversation.
func (s *runState) addInbound(msgs []mailbox.Message) {
	if len(msgs) == 0 {
		return
	}
	ids, texts := make([]string, len(msgs)), make([]string, len(msgs))
	for i, m := range msgs {
		ids[i], texts[i] = m.ID, m.Text
	}
	s.add(provider.UserMessage(jobtool.Inbound(ids, texts)))
}

// reached tells the mailbox where the run stands after step: its last
// words and what it spent so far: its own calls and its children's, as
// its cost counts them, those of children still running included (a
// background child's own jobs), and at least what its children reported.
func (s *runState) reached(step int) {
	if s.box == nil {
		return
	}
	last := ""
	for i := len(s.msgs) - 1; i >= s.start; i-- {
		if m := s.msgs[i]; m.Role == provider.RoleAssistant && m.Content != "" {
			last = m.Content
			break
		}
	}
	live, cost := run.Spent(s.ctx)
	s.box.Reached(step, last, usage.Most(s.usage.Add(s.child), live), cost)
}

// notesKey is the journal key of the notes shown before a run's first step.
func (j *runJournal) notesKey() string { return j.stepKey(1) + "/notes" }

// notes adds what the tools that are notifiers (tool.Notifier) have for a
// top-level run, before its first model call: under a journal, what an
// earlier run of the turn recorded, or else what waits, recorded first.
func (s *runState) notes() error {
	for _, nf := range s.r.tools.Notifiers() {
		t := nf.(tool.Tool) // a notifier of the registry is one of its tools
		var notes []tool.Note
		key := ""
		if s.journal != nil {
			key = s.journal.notesKey() + "/" + t.Definition().Name
			if e, ok := s.journal.scope.J.Lookup(key); ok {
				if err := json.Unmarshal(e.Value, &notes); err != nil {
					return fmt.Errorf("reading the notes of %s shown before the first step from the journal: %w", t.Definition().Name, err)
				}
				key = ""
			} else if s.journal.has(s.journal.stepKey(1)) {
				continue // the run that recorded the step showed none
			}
		}
		if notes == nil {
			notes = s.checkNotes(t.Definition().Name, nf.Notes(s.ctx))
		}
		if len(notes) == 0 {
			continue
		}
		if key != "" {
			value, _ := json.Marshal(notes) // strings only: it cannot fail
			if err := s.journal.scope.J.Record(context.WithoutCancel(s.ctx), key, journal.Entry{Value: value}); err != nil {
				return fmt.Errorf("recording the notes of %s in the journal: %w: resume the turn when the store is back", t.Definition().Name, err)
			}
		}
		ids := make([]string, len(notes))
		var b strings.Builder
		for i, n := range notes {
			ids[i] = n.ID
			s.child = s.child.Add(n.Usage)
			if i > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(n.Text)
		}
		nf.Noted(s.ctx, ids)
		s.add(provider.UserMessage(b.String()))
	}
	return nil
}

// checkNotes asks the run's policy about each note, as about a result
// the model is to read (policy.AfterResult, as the tool named name's, the
// note's id its call id): a note tells what work under the run handed
// back (a background job's answer), which a policy checks however it
// comes up. A denied note is replaced by the denial, a rewritten one by
// what the rule made of it. It runs before the notes are journaled, so a
// turn run again reads them as checked.
func (s *runState) checkNotes(name string, notes []tool.Note) []tool.Note {
	if s.policy == nil || len(notes) == 0 {
		return notes
	}
	for i := range notes {
		c := &policy.Check{Point: policy.AfterResult, Tool: name, CallID: notes[i].ID, Result: notes[i].Text}
		switch out := s.policy.Decide(s.ctx, c); out.Verdict {
		case policy.Deny:
			notes[i].Text = out.Err(c).Error()
		case policy.Rewrite:
			notes[i].Text = c.Result
		}
	}
	return notes
}
