"""The checks before a job starts: preflight and its report, the backend's choice, each
ring link's path tried, where nodes get the model from, and the network changes offered."""
