package handles

import "time"

// keptVersionsLocked adds registry's routes' kept versions to kept.
func (s *Store) keptVersionsLocked(registry string, now time.Time, retention time.Duration, kept map[string]bool) {
}
