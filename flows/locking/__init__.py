"""At most one run per profile: the lock's states and the waiter's verdict as pure rules
(lock_rules.py) and the lock that the flows hold (profile_lock.py)."""
