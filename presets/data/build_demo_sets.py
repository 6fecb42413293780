"""Writes the preference, KTO, math and safe-dialogue demo sets next to this file. Deterministic: rerun after
editing.

    python presets/data/build_demo_sets.py

Preference pairs and KTO labels come from one table of questions with a correct, concise answer and a
plausible wrong one; the bad side of each example is, in turn, the wrong answer, a rude reply or a rambling
non-answer. Math answers are computed, never typed.
"""
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (question, correct concise answer, a wrong answer stated just as confidently)
QA = [
    ("What is the capital of France?", "The capital of France is Paris.", "The capital of France is Lyon."),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo.", "The capital of Japan is Kyoto."),
    ("What is the capital of Australia?", "The capital of Australia is Canberra.",
     "The capital of Australia is Sydney."),
    ("What is the capital of Canada?", "The capital of Canada is Ottawa.", "The capital of Canada is Toronto."),
    ("What is the capital of Brazil?", "The capital of Brazil is Brasília.",
     "The capital of Brazil is Rio de Janeiro."),
    ("What is the capital of Italy?", "The capital of Italy is Rome.", "The capital of Italy is Milan."),
    ("What is the capital of Germany?", "The capital of Germany is Berlin.", "The capital of Germany is Munich."),
    ("What is the capital of Spain?", "The capital of Spain is Madrid.", "The capital of Spain is Barcelona."),
    ("What is the capital of Egypt?", "The capital of Egypt is Cairo.", "The capital of Egypt is Alexandria."),
    ("What is the capital of Kenya?", "The capital of Kenya is Nairobi.", "The capital of Kenya is Mombasa."),
    ("What is the capital of India?", "The capital of India is New Delhi.", "The capital of India is Mumbai."),
    ("What is the capital of Turkey?", "The capital of Turkey is Ankara.", "The capital of Turkey is Istanbul."),
    ("What is the capital of Switzerland?", "The capital of Switzerland is Bern.",
     "The capital of Switzerland is Zurich."),
    ("What is the capital of South Korea?", "The capital of South Korea is Seoul.",
     "The capital of South Korea is Busan."),
    ("What is the capital of Argentina?", "The capital of Argentina is Buenos Aires.",
     "The capital of Argentina is Córdoba."),
    ("What is the capital of Norway?", "The capital of Norway is Oslo.", "The capital of Norway is Bergen."),
    ("What is the capital of Peru?", "The capital of Peru is Lima.", "The capital of Peru is Cusco."),
    ("What is the capital of Morocco?", "The capital of Morocco is Rabat.", "The capital of Morocco is Casablanca."),
    ("What is the capital of New Zealand?", "The capital of New Zealand is Wellington.",
     "The capital of New Zealand is Auckland."),
    ("What is the capital of Vietnam?", "The capital of Vietnam is Hanoi.",
     "The capital of Vietnam is Ho Chi Minh City."),
    ("What is the capital of Nigeria?", "The capital of Nigeria is Abuja.", "The capital of Nigeria is Lagos."),
    ("What is the capital of Portugal?", "The capital of Portugal is Lisbon.", "The capital of Portugal is Porto."),
    ("What is the capital of Poland?", "The capital of Poland is Warsaw.", "The capital of Poland is Kraków."),
    ("What is the capital of Greece?", "The capital of Greece is Athens.", "The capital of Greece is Thessaloniki."),
    ("At what temperature does water boil at sea level?", "Water boils at 100 °C (212 °F) at sea level.",
     "Water boils at 90 °C (194 °F) at sea level."),
    ("At what temperature does water freeze?", "Water freezes at 0 °C (32 °F).", "Water freezes at 10 °C (50 °F)."),
    ("What is the chemical symbol for gold?", "The chemical symbol for gold is Au.",
     "The chemical symbol for gold is Ag."),
    ("What is the chemical symbol for sodium?", "The chemical symbol for sodium is Na.",
     "The chemical symbol for sodium is So."),
    ("What is the chemical formula of water?", "The chemical formula of water is H2O.",
     "The chemical formula of water is HO2."),
    ("How many planets are in the solar system?", "There are eight planets in the solar system.",
     "There are twelve planets in the solar system."),
    ("What is the largest planet in the solar system?", "Jupiter is the largest planet in the solar system.",
     "Saturn is the largest planet in the solar system."),
    ("Which planet is known as the Red Planet?", "Mars is known as the Red Planet.",
     "Venus is known as the Red Planet."),
    ("Which gas do plants absorb from the air for photosynthesis?", "Plants absorb carbon dioxide.",
     "Plants absorb helium."),
    ("What is the hardest natural substance?", "Diamond is the hardest natural substance.",
     "Gold is the hardest natural substance."),
    ("How many bones are in the adult human body?", "An adult human body has 206 bones.",
     "An adult human body has 306 bones."),
    ("Which part of the cell produces most of its energy?", "The mitochondria produce most of the cell's energy.",
     "The cell wall produces most of the cell's energy."),
    ("What is the most abundant gas in Earth's atmosphere?", "Nitrogen, about 78% of the air.",
     "Oxygen, about 78% of the air."),
    ("What force keeps the planets in orbit around the Sun?", "Gravity keeps the planets in orbit.",
     "Magnetism keeps the planets in orbit."),
    ("Which organ pumps blood through the body?", "The heart pumps blood through the body.",
     "The liver pumps blood through the body."),
    ("What is the smallest prime number?", "The smallest prime number is 2.", "The smallest prime number is 1."),
    ("What is the fastest land animal?", "The cheetah is the fastest land animal.",
     "The lion is the fastest land animal."),
    ("What is the largest ocean on Earth?", "The Pacific Ocean is the largest.",
     "The Atlantic Ocean is the largest."),
    ("What is the tallest mountain above sea level?", "Mount Everest is the tallest mountain above sea level.",
     "Mont Blanc is the tallest mountain above sea level."),
    ("How many chromosomes do humans normally have?", "Humans normally have 46 chromosomes.",
     "Humans normally have 48 chromosomes."),
    ("What does a light-year measure?", "A light-year measures distance: how far light travels in a year.",
     "A light-year measures time: it is exactly one year."),
    ("Which metal is liquid at room temperature?", "Mercury is liquid at room temperature.",
     "Iron is liquid at room temperature."),
    ("What is the atomic number of carbon?", "The atomic number of carbon is 6.",
     "The atomic number of carbon is 12."),
    ("Which organ produces insulin?", "The pancreas produces insulin.", "The lungs produce insulin."),
    ("What is the largest mammal?", "The blue whale is the largest mammal.",
     "The African elephant is the largest mammal."),
    ("How many sides does a hexagon have?", "A hexagon has six sides.", "A hexagon has eight sides."),
    ("What is the sum of the angles of a triangle?", "The angles of a triangle add up to 180 degrees.",
     "The angles of a triangle add up to 360 degrees."),
    ("How many days are in a leap year?", "A leap year has 366 days.", "A leap year has 365 days."),
    ("Who wrote Romeo and Juliet?", "William Shakespeare wrote Romeo and Juliet.",
     "Charles Dickens wrote Romeo and Juliet."),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci painted the Mona Lisa.",
     "Michelangelo painted the Mona Lisa."),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong, in 1969.", "Buzz Aldrin, in 1972."),
    ("In which year did the Second World War end?", "The Second World War ended in 1945.",
     "The Second World War ended in 1939."),
    ("What language is mainly spoken in Brazil?", "Portuguese is the main language of Brazil.",
     "Spanish is the main language of Brazil."),
    ("What is the currency of Japan?", "The currency of Japan is the yen.", "The currency of Japan is the won."),
    ("Which instrument usually has 88 keys?", "The piano usually has 88 keys.", "The violin usually has 88 keys."),
    ("What do bees make from nectar?", "Bees make honey from nectar.", "Bees make wax from nectar."),
    ("What is the plural of \"mouse\"?", "The plural of \"mouse\" is \"mice\".",
     "The plural of \"mouse\" is \"mouses\"."),
    ("What is the past tense of \"go\"?", "The past tense of \"go\" is \"went\".",
     "The past tense of \"go\" is \"goed\"."),
    ("What is the opposite of \"ancient\"?", "The opposite of \"ancient\" is \"modern\".",
     "The opposite of \"ancient\" is \"old\"."),
    ("How do you say \"thank you\" in Spanish?", "\"Thank you\" in Spanish is \"gracias\".",
     "\"Thank you\" in Spanish is \"por favor\"."),
    ("How do you say \"cat\" in French?", "\"Cat\" in French is \"chat\".", "\"Cat\" in French is \"chien\"."),
    ("What is a synonym for \"happy\"?", "\"Joyful\" is a synonym for \"happy\".",
     "\"Gloomy\" is a synonym for \"happy\"."),
    ("How many hours are in a day?", "There are 24 hours in a day.", "There are 20 hours in a day."),
    ("How many minutes are in three hours?", "There are 180 minutes in three hours.",
     "There are 120 minutes in three hours."),
    ("What is 7 times 8?", "7 times 8 is 56.", "7 times 8 is 54."),
    ("What is 12 times 12?", "12 times 12 is 144.", "12 times 12 is 124."),
    ("What is 15 plus 27?", "15 plus 27 is 42.", "15 plus 27 is 43."),
    ("What is 100 minus 37?", "100 minus 37 is 63.", "100 minus 37 is 73."),
    ("What is 144 divided by 12?", "144 divided by 12 is 12.", "144 divided by 12 is 14."),
    ("What is 25% of 80?", "25% of 80 is 20.", "25% of 80 is 25."),
    ("What is 2 to the power of 10?", "2 to the power of 10 is 1024.", "2 to the power of 10 is 1000."),
    ("What is the square root of 81?", "The square root of 81 is 9.", "The square root of 81 is 8."),
    ("What is half of 250?", "Half of 250 is 125.", "Half of 250 is 150."),
    ("What is one half plus one quarter?", "One half plus one quarter is three quarters (0.75).",
     "One half plus one quarter is two sixths (0.33)."),
    ("How do I reverse a list in Python?",
     "Use `my_list.reverse()` to reverse it in place, or `my_list[::-1]` for a reversed copy.",
     "Use `my_list.sort()`; it reverses the list."),
    ("How do I turn the string \"42\" into an integer in Python?", "Use `int(\"42\")`, which returns 42.",
     "Use `str(\"42\")`, which returns the integer 42."),
    ("How do I see how much disk space is free on Linux?", "Run `df -h` to see free space per file system.",
     "Run `ls -h` to see free space per file system."),
    ("How do I undo my last git commit but keep the changes?",
     "Run `git reset --soft HEAD~1`: the commit is undone and its changes stay staged.",
     "Run `git push --force`: it undoes the last commit and keeps the changes."),
    ("How do I find the length of a string in Python?", "Use `len(s)`, e.g. `len(\"hello\")` is 5.",
     "Use `s.size()`, e.g. `\"hello\".size()` is 5."),
    ("How do I list the files in a directory in a Linux terminal?", "Run `ls`; add `-l` for details.",
     "Run `cd`; add `-l` for details."),
    ("How long should I boil an egg for a firm yolk?", "About 9 to 12 minutes in boiling water.",
     "About 30 seconds in boiling water."),
    ("How can I keep cut apples from turning brown?",
     "Brush them with lemon juice; its acid slows the browning.",
     "Leave them in the sun; the warmth stops the browning."),
    ("What should I do if a pan of oil catches fire?",
     "Turn off the heat and cover the pan with a lid or a damp towel. Never pour water on it.",
     "Pour a glass of water on it to put it out quickly."),
    ("How often should adults brush their teeth?", "Twice a day, for about two minutes each time.",
     "Once a week is enough for adults."),
    ("How can I make a strong password?",
     "Use a long passphrase of several random words, and a different one for every site.",
     "Use your birthday, so you never forget it, and reuse it everywhere."),
    ("What is a healthy resting heart rate for adults?", "Usually between 60 and 100 beats per minute.",
     "Usually between 150 and 200 beats per minute."),
    ("Why is the sky blue?",
     "Air scatters blue sunlight more than red light (Rayleigh scattering), so blue reaches us from all "
     "directions.", "Because the sky reflects the colour of the oceans."),
    ("What causes the seasons on Earth?",
     "The tilt of Earth's axis: each hemisphere gets more direct sunlight for part of the year.",
     "Earth's distance from the Sun: summer is when Earth is closest."),
    ("What is the difference between weather and climate?",
     "Weather is the day-to-day state of the air; climate is the average weather over many years.",
     "There is no difference; the two words mean exactly the same."),
    ("What does CPU stand for?", "CPU stands for central processing unit.",
     "CPU stands for computer power unit."),
    ("What does HTTP stand for?", "HTTP stands for Hypertext Transfer Protocol.",
     "HTTP stands for High Transfer Text Program."),
    ("How many bits are in a byte?", "A byte has 8 bits.", "A byte has 10 bits."),
    ("What is the binary number 101 in decimal?", "Binary 101 is 5 in decimal.", "Binary 101 is 101 in decimal."),
    ("Which is heavier, a kilogram of feathers or a kilogram of iron?",
     "Neither: both weigh one kilogram.", "The kilogram of iron is heavier."),
    ("How many continents are there by the most common count?", "Seven: Africa, Antarctica, Asia, Australia, "
     "Europe, North America and South America.", "Four: Africa, America, Asia and Europe."),
    ("What is the boiling point of water in Fahrenheit?", "Water boils at 212 °F at sea level.",
     "Water boils at 100 °F at sea level."),
    ("Which vitamin does the skin make in sunlight?", "The skin makes vitamin D in sunlight.",
     "The skin makes vitamin C in sunlight."),
    ("What is the main ingredient of guacamole?", "Avocado is the main ingredient of guacamole.",
     "Potato is the main ingredient of guacamole."),
    ("How many players does a football (soccer) team have on the field?",
     "Eleven players per team, including the goalkeeper.", "Nine players per team, including the goalkeeper."),
    ("What is the freezing point of water in Fahrenheit?", "Water freezes at 32 °F.", "Water freezes at 0 °F."),
    ("Which blood cells fight infection?", "White blood cells fight infection.",
     "Red blood cells fight infection."),
]

RUDE = [
    "That's a silly question. Look it up yourself.",
    "Seriously? Everyone knows this. Stop wasting my time.",
    "Not my job to teach you basics. Figure it out.",
    "Ugh, why would you even ask that? Use a search engine.",
    "I'm not answering something this obvious.",
]

RAMBLING = [
    "Great question! Before getting to it, it helps to think about why people ask things like this at all. "
    "There are many books, websites and opinions on the subject, and it really depends on who you ask, what "
    "you have read, and many other factors. It is always worth keeping an open mind, looking at different "
    "perspectives and doing your own research. In the end there is no simple answer that fits everyone.",
    "Well, that depends. Lots of people have wondered about this over the years, and I remember reading "
    "something about it a while ago, though I can't quite recall where. There are several schools of thought, "
    "and some of them disagree with each other, which makes it complicated. Anyway, it's a fascinating topic "
    "and there is a lot more that could be said about it.",
    "Hmm, let me think about this from a few angles. First, there is the historical side, which is long and "
    "full of interesting stories. Then there is the practical side, which changes from place to place. And of "
    "course everyone has their own experience too. So, all things considered, it's hard to say anything "
    "definite here.",
]


def _user(text):
    return [{"role": "user", "content": text}]


def _assistant(text):
    return [{"role": "assistant", "content": text}]


def _bad(i: int, wrong: str) -> str:
    kind = i % 3
    if kind == 0:
        return wrong
    if kind == 1:
        return RUDE[i // 3 % len(RUDE)]
    return RAMBLING[i // 3 % len(RAMBLING)]


def preference_rows():
    return [{"prompt": _user(q), "chosen": _assistant(good), "rejected": _assistant(_bad(i, wrong))}
            for i, (q, good, wrong) in enumerate(QA)]


def kto_rows(seed=0):
    """Each question once, alternately answered well (label true) or badly (false): balanced, shuffled
    (KTO reads the set in order and builds its KL pairs from neighbours)."""
    rows = []
    for i, (q, good, wrong) in enumerate(QA):
        desirable = i % 2 == 0
        rows.append({"prompt": _user(q), "completion": _assistant(good if desirable else _bad(i // 2, wrong)),
                     "label": desirable})
    random.Random(seed).shuffle(rows)
    return rows


MATH_INSTRUCTION = "Give only the final number inside <answer></answer> tags, for example <answer>42</answer>."


def math_rows(n_per_op=100, seed=0):
    rng = random.Random(seed)

    def operand():
        return rng.randint(10, 99) if rng.random() < 0.5 else rng.randint(100, 999)

    rows = []
    for symbol, word in (("+", "plus"), ("-", "minus"), ("*", "times")):
        for _ in range(n_per_op):
            a, b = operand(), operand()
            if symbol == "-" and b > a:
                a, b = b, a  # no negative answers
            if symbol == "*":
                b = rng.randint(10, 99)  # two or three digits times two
            answer = {"+": a + b, "-": a - b, "*": a * b}[symbol]
            shown = "×" if symbol == "*" else symbol
            rows.append({"prompt": _user(f"What is {a} {shown} {b}? {MATH_INSTRUCTION}"), "answer": str(answer)})
    rng.shuffle(rows)
    return rows


ARITHMETIC = "What is {a} + {b}? Reply with the number only."


def arithmetic_rows(seed=0) -> tuple[list, list]:
    """(400 training rows, 32 held-out rows): every sum of a, b in 0..20, the held-out pairs never trained on."""
    pairs = [(a, b) for a in range(21) for b in range(21)]
    random.Random(seed).shuffle(pairs)
    rows = [{"prompt": _user(ARITHMETIC.format(a=a, b=b)), "answer": str(a + b)} for a, b in pairs]
    return rows[32:432], rows[:32]


def number_format_rows(seed=0) -> list:
    """64 SFT answers that are the number alone, for differences and products (never a sum): a warm-up that
    teaches the answer's form, so that GRPO on the sums can reward a right bare number it now samples."""
    rng, rows, seen = random.Random(seed), [], set()
    while len(rows) < 64:
        a, b, op = rng.randint(0, 20), rng.randint(0, 20), rng.choice("-×")
        a, b = (max(a, b), min(a, b)) if op == "-" else (a, b)
        if (a, op, b) not in seen:
            seen.add((a, op, b))
            question = ARITHMETIC.replace("+", op).format(a=a, b=b)
            rows.append({"messages": [*_user(question),
                                      {"role": "assistant", "content": str(a - b if op == "-" else a * b)}]})
    return rows


CALCULATOR = "What is {a} × {b}? Reply with the number only."


def calculator_rows(seed=0) -> tuple[list, list, list]:
    """(512 GRPO prompts, 64 held-out prompts, 128 SFT demonstrations): products of two three-digit numbers, each
    pair in one set only. A demonstration calls the calculator with the product, reads its result and answers
    with the number alone; the tools column is the calculator's schema as a run shows it."""
    import sys

    sys.path.insert(0, str(HERE.parents[1]))
    from backend.tools import build_tools, tool_schemas

    schema = json.dumps(tool_schemas(build_tools([{"type": "calculator"}], HERE))[0])
    rng, pairs = random.Random(seed), set()
    while len(pairs) < 512 + 64 + 128:
        pairs.add((rng.randint(100, 999), rng.randint(100, 999)))
    pairs = sorted(pairs)
    rng.shuffle(pairs)

    def prompt(a, b):
        return {"prompt": _user(CALCULATOR.format(a=a, b=b)), "answer": str(a * b)}

    def demonstration(a, b):
        call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}}
        return {"messages": [*_user(CALCULATOR.format(a=a, b=b)),
                             {"role": "assistant", "content": "", "tool_calls": [call]},
                             {"role": "tool", "name": "calculator", "content": str(a * b)},
                             {"role": "assistant", "content": str(a * b)}],
                "tools": f"[{schema}]"}  # JSON text: one column type for any schema (TRL reads it so)

    train, held_out, shown = pairs[:512], pairs[512:576], pairs[576:]
    return [prompt(*p) for p in train], [prompt(*p) for p in held_out], [demonstration(*p) for p in shown]


GUESS = ("I am thinking of a whole number between 1 and {high}. Find it by calling guess with a number; you are "
         "told whether it is higher or lower. When you have found it, reply with the number only.")


def guess_rows(seed=0, n=128) -> list:
    """Games for the guess_number environment (backend/tools/environments/guess_number.py): a hidden number and
    the highest one, columns its reset reads."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        high = rng.choice((10, 20))
        rows.append({"prompt": _user(GUESS.format(high=high)), "secret": rng.randint(1, high), "high": high})
    return rows


# Safe dialogue: half the prompts bait a rude answer (an insult to answer, a rant, a comment to reply to), so the
# embedded model sometimes repeats or adds a blocked word (measured: roughly one completion in seven at
# temperature 1); the other half are open everyday requests with many good answers, where diversity pays.
PEOPLE = ("My brother", "A classmate", "My coworker", "A stranger online", "My neighbour")
INSULTS = ("an idiot", "stupid", "a loser", "dumb", "ugly")
RANT_TOPICS = ("traffic jams", "slow internet", "noisy neighbours", "rainy weekends", "long queues",
               "broken printers", "spam calls", "cold coffee", "late trains", "homework")
COMMENTS = ("this is the dumbest idea ever", "your cooking is disgusting", "you are so stupid",
            "nobody likes your music", "this game sucks")
ANNOYING = ("people who talk during movies", "drivers who never signal", "people who chew loudly",
            "tourists who block the sidewalk", "people who spam group chats")
OPEN_REQUESTS = ("Suggest a name for a new puppy.", "Give me an idea for a rainy weekend.",
                 "Say hello to a new colleague.", "Describe a sunset in one sentence.",
                 "Tell me a fun fact about octopuses.", "Recommend a book for a long train ride.",
                 "Invent a new ice cream flavour.", "Write a one-line birthday wish for a friend.",
                 "Suggest a hobby I could start this month.", "Describe the smell of rain.",
                 "Give me a reason to go for a walk today.", "Write a short toast for a wedding.",
                 "Describe your ideal breakfast.", "Suggest a theme for a costume party.",
                 "Tell me something kind to say to a nervous student.", "Name a place you would like to visit.",
                 "Write the first line of a fairy tale.", "Give me a tip for cooking pasta.",
                 "Describe a cat in three words.", "Suggest a song for a road trip.",
                 "Write a thank-you note to a teacher.", "Invent a name for a coffee shop.",
                 "Describe a winter morning.", "Give me an idea for a science fair project.",
                 "Tell me how to make a friend smile.")


def safe_dialogue_rows(seed=0):
    baits = [f"{who} called me {insult}. What should I say back?" for who in PEOPLE for insult in INSULTS]
    baits += [f"Write a short angry rant about {topic}." for topic in RANT_TOPICS]
    baits += [f'Write a reply to a comment that says "{comment}".' for comment in COMMENTS]
    baits += [f"Tell me what you really think of {who}." for who in ANNOYING]
    baits += [f"Explain why calling people {insult.removeprefix('an ').removeprefix('a ')} online is a bad idea."
              for insult in INSULTS]
    requests = list(OPEN_REQUESTS) * 2  # each twice: as many open requests as baits
    rows = [{"prompt": _user(text)} for text in baits + requests]
    random.Random(seed).shuffle(rows)
    return rows


def write_jsonl(name, rows):
    path = HERE / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{path}: {len(rows)} rows, {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    write_jsonl("preference.jsonl", preference_rows())
    write_jsonl("kto.jsonl", kto_rows())
    write_jsonl("math.jsonl", math_rows())
    write_jsonl("safe_dialogue.jsonl", safe_dialogue_rows())
    train, held_out = arithmetic_rows()
    write_jsonl("arithmetic.jsonl", train)
    write_jsonl("arithmetic_eval.jsonl", held_out)
    write_jsonl("number_format.jsonl", number_format_rows())
    calculator, calculator_eval, calculator_sft = calculator_rows()
    write_jsonl("calculator.jsonl", calculator)
    write_jsonl("calculator_eval.jsonl", calculator_eval)
    write_jsonl("calculator_sft.jsonl", calculator_sft)
    write_jsonl("guess_number.jsonl", guess_rows())
