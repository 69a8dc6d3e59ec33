"""A small fixed corpus for engine and driver tests (a fixture, not a random input)."""
import random


def write_corpus(path, lines=3000):
    """A few thousand short sentences from a small grammar, written to `path` (seeded: the same
    text every run)."""
    r = random.Random(1234)
    subjects = ["the cat", "a dog", "my friend", "the old man", "a small bird", "the teacher", "our neighbour"]
    verbs = ["sees", "likes", "finds", "chases", "watches", "helps", "paints"]
    objects = ["the ball", "a red apple", "the garden", "a quiet river", "the blue house", "some bread"]
    text = "\n".join(f"{r.choice(subjects)} {r.choice(verbs)} {r.choice(objects)}." for _ in range(lines))
    path.write_text(text + "\n")
    return path
