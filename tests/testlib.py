"""Shared bits of the Python test drivers: counting checks and the closing line."""
import sys


class Checks:
    def __init__(self, name):
        self.name, self.passed, self.failures = name, 0, []

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
            print("FAIL:", what)

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {len(self.failures)} failed")
        sys.exit(1 if self.failures else 0)
