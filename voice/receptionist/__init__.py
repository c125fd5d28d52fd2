"""The receptionist's appointment book (SQLite) and its tools for voice calls and the engine."""
