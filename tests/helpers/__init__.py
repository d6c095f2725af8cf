"""What several test modules share. A test module imports these, never another test module
(tests/test_test_imports.py checks it)."""
