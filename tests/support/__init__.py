"""Helpers shared by test modules; fixtures stay in conftest.py, and no test module imports another."""
