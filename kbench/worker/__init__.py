"""The worker side, beside untrusted code: its loop, the call timer, what runs between calls, tripwires."""
