"""Datasets in the shapes users have them on disk (LLaMA-Factory's demo files, ShareGPT, Anthropic HH,
UltraFeedback-binarized, GSM8K), a few rows each, for the adapter tests and the runs that train on them."""

ALPACA = [  # alpaca_en_demo.json
    {"instruction": "Describe a process of making crepes.", "input": "", "output": "Making crepes is easy."},
    {"instruction": "Translate to French:", "input": "Good morning", "output": "Bonjour"},
]
IDENTITY = [  # identity.json, plus the optional system and history columns
    {"instruction": "Who are you?", "input": "", "output": "I am {{name}}, an AI assistant developed by {{author}}.",
     "system": "You are a helpful assistant.", "history": [["hi", "Hello!"]]},
    {"instruction": "What is your name?", "input": "", "output": "I am {{name}}.", "system": "", "history": []},
]
SHAREGPT = [  # glaive_toolcall_en_demo.json
    {"conversations": [
        {"from": "human", "value": "I need a new password, 12 characters."},
        {"from": "function_call", "value": '{"name": "generate_password", "arguments": {"length": 12}}'},
        {"from": "observation", "value": '{"password": "aB3$dE6&gH9!"}'},
        {"from": "gpt", "value": "Here is your new password: aB3$dE6&gH9!"}],
     "tools": '[{"name": "generate_password", "description": "Generate a password", "parameters": '
              '{"type": "object", "properties": {"length": {"type": "integer"}}}}]'},
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}], "tools": ""},
]
LF_DPO = [  # dpo_en_demo.json
    {"conversations": [{"from": "human", "value": "What is the capital of France?"}],
     "chosen": {"from": "gpt", "value": "Paris."}, "rejected": {"from": "gpt", "value": "Lyon."}},
    {"conversations": [{"from": "human", "value": "2 + 2?"}],
     "chosen": {"from": "gpt", "value": "4"}, "rejected": {"from": "gpt", "value": "5"}},
]
LF_KTO = [  # kto_en_demo.json
    {"messages": [{"content": "The FTC is going after spyware.", "role": "user"},
                  {"content": "The FTC takes action against spyware makers.", "role": "assistant"}], "label": True},
    {"messages": [{"content": "Say something nice.", "role": "user"},
                  {"content": "No.", "role": "assistant"}], "label": False},
]
HH = [  # Anthropic/hh-rlhf
    {"chosen": "\n\nHuman: What are some good fruits?\n\nAssistant: Apples and pears.\n\nHuman: Which is "
               "sweeter?\n\nAssistant: Pears, usually.",
     "rejected": "\n\nHuman: What are some good fruits?\n\nAssistant: Apples and pears.\n\nHuman: Which is "
                 "sweeter?\n\nAssistant: Who cares."},
]
Q, GOOD, BAD = "How are you?", "Fine, thanks.", "Go away."
ULTRAFEEDBACK = [  # HuggingFaceH4/ultrafeedback_binarized
    {"prompt": Q, "prompt_id": "abc",
     "chosen": [{"role": "user", "content": Q}, {"role": "assistant", "content": GOOD}],
     "rejected": [{"role": "user", "content": Q}, {"role": "assistant", "content": BAD}],
     "messages": [{"role": "user", "content": Q}, {"role": "assistant", "content": GOOD}],
     "score_chosen": 8.0, "score_rejected": 2.0},
]
GSM8K = [  # openai/gsm8k
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                 "How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
               "altogether in April and May.\n#### 72"},
]
