"""Question templates per intent, split once and for all into training and held-out sets.

Each intent maps to (train, heldout) lists of grammar templates (see grammar.py). Held-out
templates are never rendered into training data; evaluation asks only them. They are written
as different sentence constructions of the same request, with the same content words a caller
would use (a model cannot know a word it never saw). Slots: <day>, <service>, <business>.
FAQ intents take their phrasings from the fact sheet instead (the last one is held out).
Knows nothing about answers, tokenizers or models.
"""

from __future__ import annotations

QUESTIONS: dict[str, tuple[list[str], list[str]]] = {
    "hours_day": ([
        "(what are|what're) your hours (on|for) <day>",
        "(what time|when) do you open (on|this) <day>",
        "(what time|when) do you (close|shut) (on|this) <day>",
        "are you open (on|this) <day>",
        "(is|are) the (clinic|office) open (on|this) <day>",
        "how late are you open (on|this) <day>",
        "what time (do you|does the office) (open|close) <day>",
        "(can|could) i come in (on|this) <day>",
        "(what|which) hours (are you|is the office) open (on|this) <day>",
        "(are you|is the office) open <day> [morning|afternoon]",
        "<day> hours",
        "hours (on|for) <day> please",
        "(do you|does the clinic) work (on|this) <day>",
    ], [
        "when are you open on <day>",
        "i wanted to know your <day> hours",
        "what are the opening hours for <day>",
        "open on <day> or not",
        "tell me (your|the) hours for <day>",
    ]),
    "hours_week": ([
        "what are your (hours|opening hours|business hours)",
        "when are you open",
        "(what|which) days are you open",
        "what (time|hours) are you open [during the week]",
        "(are you|is the office) open (now|right now|today)",
        "when (is|does) the (clinic|office) open",
        "(what are|what're) the hours (for|at) <business>",
        "what are your hours this week",
        "(when|what time) do you (open|close) [today]",
        "hours please",
    ], [
        "tell me your (hours|opening hours)",
        "what days and times are you open",
        "is <business> open today",
        "i need your business hours",
    ]),
    "address": ([
        "(what's|what is) (your|the) address",
        "where are you (located|at)",
        "where is (the clinic|the office|<business>)",
        "(what|which) street are you on",
        "(can|could) you (give|tell) me (your|the) address",
        "address please",
        "where (exactly|) is your (clinic|office) (located|)",
        "what's the location",
    ], [
        "where can i find you",
        "i need the address of <business>",
        "what's the street address",
    ]),
    "directions": ([
        "how do i (get|find) (there|you|the clinic)",
        "(can|could) you give me directions",
        "how do i find (your office|the building|you)",
        "what's (near|next to) you",
        "(any|what are the) directions to (the clinic|your office|<business>)",
        "what's the best way to get there",
        "i'm lost (how|where) do i (go|get there)",
    ], [
        "directions please",
        "what landmark are you next to",
        "i'm trying to find your office",
    ]),
    "phone": ([
        "(what's|what is) your (phone|telephone) number",
        "(what|which) number (can|should) i call",
        "how (can|do) i (call|phone) you",
        "(can|could) i (have|get) your (number|phone number)",
        "phone number please",
        "(what's|what is) the number (for|of) <business>",
        "what's the best number to reach you",
    ], [
        "give me your phone number",
        "how can i reach you by phone",
        "your number please",
    ]),
    "email": ([
        "(what's|what is) your email [address]",
        "(can|could) i email you",
        "how (do|can) i (email|write to) you",
        "(what|which) email (should|can) i (use|write to)",
        "email address please",
        "do you have an email",
    ], [
        "where do i send an email",
        "give me your email",
        "is there an email i can use",
    ]),
    "price": ([
        "how much (is|does) <service> [cost]",
        "how much for <service>",
        "(what's|what is) the (price|cost) (of|for) <service>",
        "what do you charge for <service>",
        "how much do you charge for <service>",
        "(what does|how much does) <service> cost",
        "price (of|for) <service>",
        "(is|are) <service> expensive",
        "how much (will|would) i pay for <service>",
        "what's the fee for <service>",
    ], [
        "what would <service> cost me",
        "i want to know the price of <service>",
        "cost of <service>",
        "how expensive is <service>",
    ]),
    "duration": ([
        "how long (does|will) <service> take",
        "how (much time|long) (is|for) <service>",
        "how long (is|would be) the appointment for <service>",
        "what's the (length|duration) of <service>",
        "how (many minutes|long) (do i need|should i plan) for <service>",
        "(will|does) <service> take long",
    ], [
        "how much time does <service> take",
        "how long am i there for <service>",
        "<service> takes how long",
    ]),
    "services_list": ([
        "what (services|treatments) do you (offer|have|provide)",
        "what do you (do|offer)",
        "(what kind of|which) (services|treatments) (are there|do you do)",
        "(can|could) you tell me (your|the) services",
        "what can i (book|get done) (there|with you)",
        "list (your|the) services",
    ], [
        "which services are available",
        "what treatments can i get",
        "tell me what services you have",
    ]),
    "booking": ([
        "i'd like to (book|make|schedule) (an appointment|a visit)",
        "(can|could) i (book|make|schedule) an appointment",
        "how (do|can) i (book|make) an appointment",
        "i (want|need) to (book|schedule) [an appointment|a visit]",
        "(can|could) you book me in",
        "i need an appointment",
        "how do i schedule a visit",
        "(are there|do you have) any (appointments|openings) (available|free)",
    ], [
        "book me an appointment please",
        "i'd like to come in for an appointment",
        "what's the way to make an appointment",
    ]),
    # ----------------------------------------------------------------- small talk
    "greeting": ([
        "(hi|hello|hey) [there]",
        "good (morning|afternoon|evening)",
        "(hi|hello) is this <business>",
        "(hi|hello) am i speaking (to|with) <business>",
        "hello anyone there",
        "(hi|hello|hey) how's it going",
    ], [
        "hey good morning",
        "is this <business>",
    ]),
    "how_are_you": ([
        "how are you [doing] [today]",
        "how's your day [going]",
        "(hi|hello) how are you",
        "are you doing (ok|okay|well)",
    ], [
        "how are things",
        "how are you doing this morning",
    ]),
    "thanks": ([
        "(thanks|thank you) [so much|very much|a lot]",
        "(great|perfect|awesome|okay) (thanks|thank you)",
        "that's (helpful|great) thank you",
        "(cool|got it) thanks",
    ], [
        "thank you that helps",
        "perfect thank you so much",
    ]),
    "goodbye": ([
        "(bye|goodbye) [now]",
        "(ok|okay) (bye|goodbye)",
        "that's all (thanks|thank you) bye",
        "(have a good|have a nice) (day|one)",
        "no that's (all|it) [bye]",
        "(talk to you later|see you)",
    ], [
        "alright bye then",
        "that's everything goodbye",
    ]),
    "who_are_you": ([
        "who (is this|am i talking to|are you)",
        "what's your name",
        "who am i speaking (to|with)",
        "(what|who) are you",
    ], [
        "may i ask who this is",
        "and you are",
    ]),
    "are_you_human": ([
        "are you a (robot|bot|machine|computer)",
        "am i talking to a (real person|human|robot)",
        "is this a (recording|bot|real person)",
        "are you (real|human|a real person)",
        "are you an (ai|assistant)",
    ], [
        "is this an automated system",
        "am i speaking to a machine",
    ]),
    "repeat": ([
        "(sorry|pardon|what)",
        "(sorry|what) i didn't (catch|hear) that",
        "(can|could) you (repeat|say) that (again|)",
        "come again",
        "i didn't understand",
        "say that again please",
    ], [
        "sorry can you repeat",
        "what did you say",
    ]),
    "human_agent": ([
        "(can|could) i (talk|speak) to (a person|someone|a human|the front desk)",
        "(put me through|transfer me) to (someone|a person|the front desk)",
        "i want to (talk|speak) to a (real person|human)",
        "(get me|connect me with) (a person|someone|a human)",
    ], [
        "is there a person i can talk to",
        "let me talk to someone real",
    ]),
    "out_of_scope": ([
        "(what's|how's) the weather [like] [today]",
        "tell me a joke",
        "who won the game last night",
        "(can|could) you order (me|) a pizza",
        "what's the capital of (france|spain|italy)",
        "(do you|can you) sell car insurance",
        "what's two plus two",
        "(play|put on) some music",
        "what time is it in (london|tokyo)",
        "i want to book a flight",
        "how do i fix my computer",
        "(can|could) you recommend a (movie|restaurant|book)",
        "what's your favorite (color|food|song)",
        "do you like (sports|dogs|cats)",
    ], [
        "what's the news today",
        "can you help me with my homework",
        "recommend a good restaurant nearby",
        "do you know any good songs",
    ]),
}

# Fillers around the core question (ASR keeps them). Held-out ones only appear in evaluation.
PREFIXES = ([
    "", "", "", "", "um", "uh", "hi", "hello", "hey", "yeah hi", "hi there", "good morning",
    "okay", "so", "quick question", "hi i was wondering", "hello yes", "yes hi", "um hi",
    "sorry", "hi um", "excuse me",
], ["hey there", "hello um", "okay so"])
SUFFIXES = ([
    "", "", "", "", "", "please", "thanks", "thank you", "thanks so much",
], ["if you could", "thank you very much"])

# Intents whose answer states a business fact (scored for fact accuracy); the rest are small talk.
FACT_INTENTS = ("hours_day", "hours_week", "address", "directions", "phone", "email", "price",
                "duration", "services_list", "booking")
SMALL_TALK_INTENTS = ("greeting", "how_are_you", "thanks", "goodbye", "who_are_you",
                      "are_you_human", "repeat", "human_agent", "out_of_scope")
