package mailbox

import "testing"

// What a box is told as its child begins a step may fill the box, and
// what it puts there is what the step takes: a box filled from elsewhere
// (a job whose messages wait in another process) is filled then.
func TestBeganMayFillTheBox(t *testing.T) {
	var b *Box
	var told []int
	b = New(nil)
	b.SetNotify(Notify{Began: func(step int) {
		told = append(told, step)
		if _, err := b.Requeue(Message{ID: "m1", Text: "read this first"}); err != nil {
			t.Errorf("filling the box as step %d begins: %v", step, err)
		}
	}})
	b.Began(2)
	ms := b.Waiting()
	if len(told) != 1 || told[0] != 2 || len(ms) != 1 || ms[0].ID != "m1" {
		t.Fatalf("told %v, waiting %+v; want step 2 told, and the message it put there waiting", told, ms)
	}
	b.Take(2, len(ms))
	if r, ok := b.Receipt("m1"); !ok || r.State != Delivered || r.Step != 2 {
		t.Errorf("the message's receipt is %+v, want delivered before step 2", r)
	}
}
