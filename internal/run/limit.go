package run

import "errors"

// CostLimited marks err, the error of a run stopped by its cost limit, so
// that the tool that started the run can tell that limit from its token
// limit (IsCostLimited); its text, and the errors it wraps, are err's.
func CostLimited(err error) error { return costLimited{err} }

type costLimited struct{ error }

func (e costLimited) Unwrap() error { return e.error }

// IsCostLimited reports whether err, or an error it wraps, was marked by
// CostLimited.
func IsCostLimited(err error) bool {
	var c costLimited
	return errors.As(err, &c)
}
