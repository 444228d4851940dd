package provider

import (
	"fmt"
	"strconv"
	"time"
)

// FormatTimeout renders a duration as AAP writes one: a whole number and one unit
// (^[1-9][0-9]*(s|m|h)$), the largest unit that is exact: 90m for 1h30m, 2h, 2669s for 44m29s. A
// fraction of a second is dropped (rounded down). A duration under 1s has no AAP form: an error.
func FormatTimeout(d time.Duration) (string, error) {
	if d < time.Second {
		return "", fmt.Errorf("%s is shorter than 1s, the shortest duration AAP can express", d)
	}
	d = d.Truncate(time.Second)
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.suffix, nil
		}
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s", nil
}
