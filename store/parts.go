package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// A record that grows at its end — a resident's conversation, a thread —
// is kept in parts, so that adding to it writes what was added, not the
// whole: a small head record under its key names the parts, each a record
// of its own; the first holds the whole as it was last written whole, the
// others what each append added. The head and a part are written in one
// transaction, so a part no head names is never read. The whole is
// written again, under a new id, when the appended parts would outweigh it
// (or pass minLogBytes, for a small one) or would number more than
// maxParts: an append writes, amortized, at most about twice what it adds,
// and a read gets at most maxParts records, in one listing. A value stored
// whole before (by Put, or by an earlier version) reads as one part, and
// the next append writes it in parts.
const (
	maxParts    = 1024
	minLogBytes = 64 << 10
)

// Parts is where a record kept in parts stands, as its reader or writer
// last saw it: what AppendPart adds to, and what ReadParts reads on from.
// The zero Parts stands for a record not stored.
type Parts struct {
	// Version is the version of the record's head (0: none stored).
	Version int64
	head    partsHead
}

// partsHead is the stored head of a record kept in parts: their id and
// number, what the first weighs, and what the others weigh together. A
// zero ID stands for a record stored whole, not in parts.
type partsHead struct {
	ID    string `json:"id"`
	Parts int    `json:"parts"`
	Base  int    `json:"base"`
	Log   int    `json:"log"`
}

type headJSON struct {
	Parts *partsHead `json:"parts"`
}

// partPrefix is the beginning of the keys of the parts of the record ns+key
// under id ("": of all its parts). U+001F is in no key a user gives, so no
// other record's parts start the same way.
func partPrefix(ns, key, id string) string {
	if id == "" {
		return nsPart + ns + key + "\x1f"
	}
	return nsPart + ns + key + "\x1f" + id + "\x1f"
}

func partKey(ns, key, id string, i int) string {
	return partPrefix(ns, key, id) + fmt.Sprintf("%06d", i)
}

// ReadParts returns the parts of the record under key that AppendPart
// wrote, with where it stands now: all of them (from 0), or, when seen is
// where the record stood and it only grew since, just the parts added
// after seen (from is then how many are left out; none at all when it did
// not change). A value Put stored whole reads as one part. A missing
// record is an error wrapping ErrNotFound.
func (s *Store) ReadParts(ctx context.Context, key string, seen Parts) (parts [][]byte, from int, now Parts, err error) {
	if err := s.open(); err != nil {
		return nil, 0, Parts{}, err
	}
	if err := checkKey(key); err != nil {
		return nil, 0, Parts{}, err
	}
	return s.readParts(ctx, nsValue, key, seen)
}

// headOf reads where the record ns+key stands, and its payload when it is
// stored whole (not in parts).
func (s *Store) headOf(ctx context.Context, ns, key string) (now Parts, whole []byte, err error) {
	payload, version, isHead, err := s.getRecord(ctx, ns+key)
	if err != nil {
		return Parts{}, nil, err
	}
	if !isHead {
		return Parts{Version: version}, payload, nil
	}
	var hj headJSON
	if err := json.Unmarshal(payload, &hj); err != nil || hj.Parts == nil {
		return Parts{}, nil, fmt.Errorf("%w: the head of %q cannot be read: delete it", ErrCorrupt, key)
	}
	h := *hj.Parts
	if h.ID == "" || h.Parts < 1 || h.Parts > maxParts {
		return Parts{}, nil, fmt.Errorf("%w: %q names %d parts under %q: delete it", ErrCorrupt, key, h.Parts, h.ID)
	}
	return Parts{Version: version, head: h}, nil, nil
}

func (s *Store) readParts(ctx context.Context, ns, key string, seen Parts) (parts [][]byte, from int, now Parts, err error) {
	// A writer that rewrites the record whole deletes the parts it
	// replaced: a reader without the writer's lock may find one gone
	// between the head and the parts. It reads again, a few times, before
	// calling a missing part damage.
	for range 3 {
		var missing error
		parts, from, now, missing, err = s.readPartsOnce(ctx, ns, key, seen)
		if err != nil || missing == nil {
			return parts, from, now, err
		}
		again, _, err := s.headOf(ctx, ns, key)
		if err != nil {
			return nil, 0, Parts{}, err
		}
		if again == now {
			return nil, 0, Parts{}, fmt.Errorf("%w: %q: %v: delete it", ErrCorrupt, key, missing)
		}
	}
	return nil, 0, Parts{}, fmt.Errorf("%w: %q changed under three reads in a row: read it again", ErrConflict, key)
}

// readPartsOnce reads the record as readParts does; missing says which
// part its head named and was not found.
func (s *Store) readPartsOnce(ctx context.Context, ns, key string, seen Parts) (parts [][]byte, from int, now Parts, missing, err error) {
	now, whole, err := s.headOf(ctx, ns, key)
	if err != nil {
		return nil, 0, Parts{}, nil, err
	}
	if whole != nil {
		return [][]byte{whole}, 0, now, nil, nil
	}
	h := now.head
	if seen.head.ID == h.ID && seen.head.Parts <= h.Parts && seen.Version <= now.Version {
		from = seen.head.Parts
	}
	if from == h.Parts {
		return nil, from, now, nil, nil
	}
	if from > 0 {
		// Only what was added: one record each, typically one.
		for i := from; i < h.Parts; i++ {
			part, _, err := s.get(ctx, partKey(ns, key, h.ID, i))
			if errors.Is(err, ErrNotFound) {
				return nil, 0, now, fmt.Errorf("part %d of %d is missing", i, h.Parts), nil
			}
			if err != nil {
				return nil, 0, Parts{}, nil, err
			}
			parts = append(parts, part)
		}
		return parts, from, now, nil, nil
	}
	items, err := s.b.List(ctx, partPrefix(ns, key, h.ID))
	if err != nil {
		return nil, 0, Parts{}, nil, err
	}
	for _, it := range items {
		i := len(parts)
		if i == h.Parts {
			break // a part written by an append whose head was not: never read
		}
		if it.Key != partKey(ns, key, h.ID, i) {
			return nil, 0, now, fmt.Errorf("part %d of %d is missing", i, h.Parts), nil
		}
		part, err := open(it.Key, it.Value)
		if err != nil {
			return nil, 0, Parts{}, nil, err
		}
		parts = append(parts, part)
	}
	if len(parts) < h.Parts {
		return nil, 0, now, fmt.Errorf("%d of its %d parts are there", len(parts), h.Parts), nil
	}
	return parts, from, now, nil, nil
}

// AppendPart adds part at the end of the record under key, if it still
// stands where at says (else ErrConflict, and nothing is written), and
// returns where it stands now. When the record should be written whole
// instead — part is nil, it is not in parts yet, or the parts would grow
// too many or too heavy — AppendPart writes what whole returns, the whole
// record with part in it, and deletes the old parts.
func (s *Store) AppendPart(ctx context.Context, key string, at Parts, part []byte, whole func() ([]byte, error)) (Parts, error) {
	if err := s.open(); err != nil {
		return Parts{}, err
	}
	if err := checkKey(key); err != nil {
		return Parts{}, err
	}
	return s.appendPart(ctx, nsValue, key, at, part, whole, nil)
}

// AppendPart adds to the record under key as Store.AppendPart does, fenced
// by the lock as Lock.Put is.
func (l *Lock) AppendPart(ctx context.Context, key string, at Parts, part []byte, whole func() ([]byte, error)) (Parts, error) {
	s := l.s
	if err := s.open(); err != nil {
		return Parts{}, err
	}
	if err := checkKey(key); err != nil {
		return Parts{}, err
	}
	now, err := s.appendPart(ctx, nsValue, key, at, part, whole, &Fence{Key: l.key, Owner: l.owner})
	if err != nil {
		return Parts{}, fmt.Errorf("store: writing %q under lock %q: %w", key, l.key, err)
	}
	return now, nil
}

func (s *Store) appendPart(ctx context.Context, ns, key string, at Parts, part []byte, whole func() ([]byte, error), fence *Fence) (Parts, error) {
	if at.Version < 0 {
		return Parts{}, fmt.Errorf("store: appending to %q at version %d: pass the Parts ReadParts or AppendPart returned", key, at.Version)
	}
	h := at.head
	old := h
	if part != nil && h.ID != "" && h.Parts < maxParts && h.Log+len(part) <= max(h.Base, minLogBytes) {
		h.Parts++
		h.Log += len(part)
	} else {
		var err error
		if part, err = whole(); err != nil {
			return Parts{}, err
		}
		var rnd [8]byte
		_, _ = rand.Read(rnd[:])
		h = partsHead{ID: hex.EncodeToString(rnd[:]), Parts: 1, Base: len(part)}
	}
	pk := partKey(ns, key, h.ID, h.Parts-1)
	prec, err := s.seal(pk, part)
	if err != nil {
		return Parts{}, err
	}
	head, _ := json.Marshal(headJSON{Parts: &h}) // strings and numbers: it cannot fail
	hrec, err := s.sealAs(headFormat, ns+key, head)
	if err != nil {
		return Parts{}, err
	}
	version := at.Version
	if err := s.b.Put(ctx, Write{Key: pk, Value: prec, Version: AnyVersion, Fence: fence}, Write{Key: ns + key, Value: hrec, Version: version, Fence: fence}); err != nil {
		return Parts{}, err
	}
	if old.ID != "" && old.ID != h.ID {
		// No head names them now; a part a failed delete leaves is never
		// read, and deleting the record takes it.
		_ = s.deleteAll(ctx, partPrefix(ns, key, old.ID))
	}
	return Parts{Version: version + 1, head: h}, nil
}
