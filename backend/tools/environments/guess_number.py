"""Guess the number: the shipped example of an environment (docs/agentic.md), written as a user's own would be.

Each episode hides a whole number between 1 and `high` (the dataset row's `secret` and `high` columns). The model
calls guess(number) and is told whether the number is higher or lower; the reward is 1 for finding it within the
guesses a halving search needs, less for each guess beyond them, 0 when it never finds it.
Standard library only: it runs in a process of its own, like any environment.
"""
import math


class GuessNumber:
    """Find the hidden whole number with as few guesses as you can."""

    def reset(self, secret=1, high=10, **row):
        """A new game from the dataset row (its other columns, the prompt among them, are not needed)."""
        self.secret, self.high = int(secret), int(high)
        self.guesses, self.found = 0, False
        return None  # the prompt already says what to do

    def guess(self, number: int) -> str:
        """Guesses the hidden number and says whether it is higher, lower or found.

        Args:
            number: Your guess, a whole number between 1 and the highest number the game allows.
        """
        if self.found:
            return f"You already found it: {self.secret}."
        self.guesses += 1
        number = int(number)
        if number < self.secret:
            return f"{number} is too low: the number is higher."
        if number > self.secret:
            return f"{number} is too high: the number is lower."
        self.found = True
        return f"{number} is correct, found in {self.guesses} guesses."

    def get_reward(self) -> float:
        if not self.found:
            return 0.0
        fewest = math.ceil(math.log2(self.high + 1))  # a halving search's worst case
        return 1.0 if self.guesses <= fewest else max(0.2, fewest / self.guesses)
