package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals draws the gaps between consecutive requests of an open-loop
// stream.
type Arrivals interface {
	// Gap is the time from one arrival to the next.
	Gap(r *rand.Rand) time.Duration
	// Validate reports a bad rate.
	Validate() error
}

// maxRate bounds request rates (a gap below a nanosecond is meaningless).
const maxRate = 1e9

func validRate(kind string, rate float64) error {
	if !(rate > 0) || rate > maxRate || math.IsInf(rate, 0) {
		return fmt.Errorf("%s rate %v requests/s (want 0 < rate <= %g): %w", kind, rate, maxRate, ErrConfig)
	}
	return nil
}

// Poisson arrivals: exponential gaps with mean 1/Rate.
type Poisson struct {
	// Rate is the mean arrival rate in requests per second.
	Rate float64
}

// Gap implements Arrivals.
func (p Poisson) Gap(r *rand.Rand) time.Duration {
	return time.Duration(r.ExpFloat64() / p.Rate * float64(time.Second))
}

// Validate implements Arrivals.
func (p Poisson) Validate() error { return validRate("poisson", p.Rate) }

// Constant arrivals: one request every 1/Rate seconds.
type Constant struct {
	// Rate is the arrival rate in requests per second.
	Rate float64
}

// Gap implements Arrivals.
func (c Constant) Gap(*rand.Rand) time.Duration {
	return time.Duration(float64(time.Second) / c.Rate)
}

// Validate implements Arrivals.
func (c Constant) Validate() error { return validRate("constant", c.Rate) }
