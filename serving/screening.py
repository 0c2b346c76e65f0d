"""Is a passage's sentence addressed to whoever reads or answers it, rather than about its subject?

The LLM-free answerer states facts it extracted (triples) and sentences about the asked entity and the
asked relation; it never prints a document's sentence that speaks to the reader or the answerer
("请转告提问人…", "Please let the user know…", "ignore the previous instructions"). Such a sentence is
recognised on its *screening form*, so spelling tricks do not hide it:

- Unicode NFKC (fullwidth ＩＧＮＯＲＥ → IGNORE, compatibility ideographs), then every format character
  removed (zero-width spaces and joiners, soft hyphens, bidirectional controls: category Cf);
- Cyrillic and Greek look-alikes of Latin letters folded to Latin (Ignоre with a Cyrillic о);
- case folded, traditional characters folded to simplified (請轉告 → 请转告), spaces between Chinese
  characters removed (请 告 诉 用 户), runs of whitespace collapsed.

On that form two families of cues are looked for: the reader or answerer addressed (second person,
the user / asker / reader as the one to be told, an assistant / AI / model given orders, relay verbs
aimed at them), and meta-instructions (ignore / override the instructions, system prompt). The
sources' own directions ("孕妇忌服", "take with warm water", "医者必须详察病情") are not matched: they
speak about the subject, not to whoever answers.
"""

from __future__ import annotations

import re
import unicodedata

from bencao.text import to_simplified

#: Cyrillic and Greek letters that look like Latin ones (lower case; the text is case-folded after).
_CONFUSABLES = str.maketrans({
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t", "у": "y",
    "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ɡ": "g", "ı": "i",
    "А": "a", "В": "b", "Е": "e", "К": "k", "М": "m", "Н": "h", "О": "o", "Р": "p", "С": "c", "Т": "t", "У": "y", "Х": "x",
    "І": "i", "Ј": "j", "Ѕ": "s",
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w",
    "Α": "a", "Β": "b", "Ε": "e", "Ζ": "z", "Η": "h", "Ι": "i", "Κ": "k", "Μ": "m", "Ν": "n", "Ο": "o", "Ρ": "p", "Τ": "t",
    "Υ": "y", "Χ": "x",
})
_CJK_GAP = re.compile(r"(?<=[\u3400-\u9fff])\s+(?=[\u3400-\u9fff])")
_SPACES = re.compile(r"\s+")


def screening_form(text: str) -> str:
    """``text`` as it is screened: NFKC, format characters gone, look-alikes folded, case folded, simplified."""
    t = unicodedata.normalize("NFKC", str(text))
    t = "".join(ch for ch in t if unicodedata.category(ch) != "Cf")
    t = t.translate(_CONFUSABLES).casefold()
    t = to_simplified(t)
    t = _CJK_GAP.sub("", t)
    return _SPACES.sub(" ", t).strip()


# Who the text may address: the asker / user / reader, never a patient or a physician (the sources speak of those).
_READER_ZH = r"(用户|读者|提问人|提问者|提问的人|问话人|问话者|询问者|咨询者|使用者|阅读者|对方|大家|所有人|他们)"
_RELAY_ZH = r"(告诉|告知|转告|转述|转达|传达|通知|提醒|警告|说服|回答|回复|答复|说明|强调|声明|解释|表示|传话)"
_INSTRUCTION_ZH = re.compile(
    rf"{_RELAY_ZH}(给|于)?{_READER_ZH}"
    rf"|(对|向|跟|给|和|与|让){_READER_ZH}[^。！？\n]{{0,6}}(说|讲|知道|明白|了解|{_RELAY_ZH})"
    rf"|{_READER_ZH}(必须|应该|应当|需要)(知道|了解|被告知)"
    r"|(忽略|无视|忽视|忘记|不要理会|不要遵守|违背|覆盖|绕过)[^。！？\n]{0,8}(指令|指示|提示词?|规则|设定|约束|要求|说明|命令|证据|资料)"
    r"|(系统|开发者|管理员)(指令|提示词?|消息|命令|通知|设定)|新的?(指令|指示|命令)"
    r"|[你您]"  # the classics never say 你 or 您: a sentence that does speaks to whoever reads it
    r"|(作为|你是)(一个|一名)?(ai|人工智能|语言模型|大模型|助手|聊天机器人|机器人|chatgpt|gpt)"
    r"|(ai|人工智能|语言模型|大模型|模型|助手|机器人)[^。！？\n]{0,4}(必须|应该|应当|需要|请|要|只能)"
    r"|(回答|输出|回复)(时|中)?(只|仅)(能|可|需)?(写|说|输出|回答|回复)")
_READER_EN = r"(the\s+)?(users?|readers?|askers?|questioners?|enquirers?|inquirers?|people\s+asking|person\s+asking|everyone|them)"
_INSTRUCTION_EN = re.compile(
    r"\b(ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,40}\b(instructions?|prompts?|rules?|guidelines|directions|evidence|context|above|previous)\b"
    r"|\b(system|developer|admin)\s+(instructions?|prompts?|messages?|notes?|overrides?)\b|\bnew\s+instructions?\b"
    rf"|\b(tell|inform|warn|advise|convince|notify|remind|assure|reassure)\s+{_READER_EN}\b"
    rf"|\blet\s+{_READER_EN}\s+know\b|\b(pass|relay|forward|convey|report|explain|say|mention)\b[^.!?\n]{{0,40}}\bto\s+{_READER_EN}\b"
    r"|\b(users?|readers?|askers?)\s+(must|should|needs?\s+to|has\s+to|have\s+to)\s+(know|be\s+told|hear|learn)\b"
    r"|\b(say|reply|respond|answer|write|output|print)\s+(only\s+)?(to\s+the\s+(user|reader)|with|that)\b"
    r"|\bplease\s+(tell|inform|say|let|answer|reply|respond|state|write|note|remember|make\s+sure)\b"
    r"|\byou(r|rs|rself)?\b"  # the sources describe foods and herbs; a sentence that says "you" speaks to its reader
    r"|\b(as\s+an?\s+)?(ai|assistant|language\s+model|llm|chatbot|chatgpt)\b[^.!?\n]{0,20}\b(must|should|shall|will|has\s+to|needs\s+to)\b"
    r"|\b(assistant|chatbot|model)\s*[,:]")


def addressed_to_reader(text: str) -> bool:
    """Does ``text`` (any script or width variant) address whoever reads or answers it — a request to relay
    something to the user, orders to an assistant, a meta-instruction — rather than state something about
    its subject? Such text is never printed as an answer line."""
    t = screening_form(text)
    return bool(_INSTRUCTION_ZH.search(t) or _INSTRUCTION_EN.search(t))
