"""What the chat says, in English and Chinese; the browser's Accept-Language picks one."""

from __future__ import annotations

from typing import Literal

Language = Literal["en", "zh"]

TEXTS: dict[Language, dict[str, str]] = {
    "en": {
        "welcome": "Ask me about the company's documents. I answer from **{documents}** indexed "
                   "(**{chunks}** passages{kinds}), and every answer lists its sources: click **[1]**, **[2]**… "
                   "to read the passage{pdf_hint}.",
        "welcome_pdf_hint": " (a PDF opens at its page)",
        "welcome_empty": "The knowledge base is empty: nothing is indexed yet. Ask an administrator to run "
                         "`rag-ingest` on the documents folder.",
        "documents": "{n} documents",
        "searching": "Searching documents",
        "found": "{n} passages found (best match {score:.2f})",
        "searched_for": "Searched for “{query}” (the question, with the conversation so far)",
        "found_none": "Nothing close enough in the documents",
        "sources": "Sources",
        "page": "p. {page}",
        "uncited": "⚠️ This answer cites no source; check it against the sources below.",
        "not_found_title": "Not in the documents",
        "not_found_body": "I couldn't find this in the indexed documents, so I won't guess. Try rephrasing with "
                          "the words your documents use, or contact the helpdesk.",
        "metrics_tokens": "{prompt} tokens in · {completion} out", "metrics_first": "first token {first}",
        "metrics_total": "{total} total", "metrics_rate": "{rate} tok/s", "metrics_quoted": "quoted",
        "metrics_refused": "no answer", "metrics_withheld": "model draft withheld ({tokens})",
        "llm_down": "The answer service is unreachable right now. Please try again in a minute; if it persists, "
                    "tell the helpdesk.",
        "store_down": "The document index cannot be reached right now. Please try again shortly.",
        "empty_index": "The knowledge base is empty: nothing is indexed yet. Ask an administrator to run "
                       "`rag-ingest`.",
        "failed": "Something went wrong while answering (reference {ref}). Please try again.",
        "busy": "Many people are asking right now; please try again in a few seconds.",
        "too_long": "That question is too long to answer: keep it under {limit} characters.",
        "admin_hint": "As an administrator you can add documents: drop {kinds} files (up to {size} each, {n} at a "
                      "time) into the chat.",
        "upload_admins_only": "Only administrators can add documents to the knowledge base; {files} not stored.",
        "upload_too_many": "Drop at most {limit} files at a time; {files} not stored.",
        "upload_received": "📄 `{name}` received ({size}): indexing…",
        "upload_done": "✅ `{name}` {status}: {chunks}, {visible}.",
        "passage_one": "{n} passage", "passage_many": "{n} passages",
        "upload_added": "added", "upload_updated": "replaced", "upload_unchanged": "unchanged (already indexed)",
        "visible_public": "visible to everyone", "visible_private": "visible to `*` users only (RAG_UNGROUPED)",
        "visible_groups": "visible to the groups {groups}", "visible_locked": "locked (visible to `*` users only)",
        "upload_failed": "⚠️ `{name}` was not added: {reason}",
        "upload_busy": "ingest busy ({reason})",
        "upload_error": "something went wrong (reference {ref})",
        "upload_exists": "`{name}` is already in the knowledge base. Replace it with the file you dropped?",
        "upload_replace": "Replace", "upload_keep": "Keep the indexed one",
        "upload_kept": "kept the indexed version",
    },
    "zh": {
        "welcome": "可以向我询问公司文档中的内容。我根据已索引的 **{documents}**（**{chunks}** 个段落{kinds}）"
                   "作答，每个回答都列出来源：点击 **[1]**、**[2]**… 查看原文{pdf_hint}。",
        "welcome_pdf_hint": "（PDF 会打开到对应页）",
        "welcome_empty": "知识库是空的：尚未索引任何文档。请联系管理员对文档目录运行 `rag-ingest`。",
        "documents": "{n} 份文档",
        "searching": "正在检索文档",
        "found": "找到 {n} 个段落（最佳匹配 {score:.2f}）",
        "searched_for": "检索内容：“{query}”（结合了之前的对话）",
        "found_none": "文档中没有足够相关的内容",
        "sources": "来源",
        "page": "第 {page} 页",
        "uncited": "⚠️ 这个回答没有引用来源，请对照下面的来源核实。",
        "not_found_title": "文档中没有相关内容",
        "not_found_body": "在已索引的文档中没有找到答案，所以我不做猜测。请换一种说法（使用文档中的用词），"
                          "或联系服务台。",
        "metrics_tokens": "输入 {prompt} 词元 · 输出 {completion}", "metrics_first": "首词元 {first}",
        "metrics_total": "总计 {total}", "metrics_rate": "{rate} 词元/秒", "metrics_quoted": "引用原文",
        "metrics_refused": "未作答", "metrics_withheld": "模型草稿未显示（{tokens}）",
        "llm_down": "回答服务暂时无法连接。请稍后再试；如果问题持续，请联系服务台。",
        "store_down": "暂时无法访问文档索引，请稍后再试。",
        "empty_index": "知识库是空的：尚未索引任何文档。请联系管理员运行 `rag-ingest`。",
        "failed": "回答时出错（参考编号 {ref}），请重试。",
        "busy": "当前提问的人很多，请几秒钟后再试。",
        "too_long": "问题太长，无法回答：请控制在 {limit} 个字符以内。",
        "admin_hint": "您是管理员，可以添加文档：把 {kinds} 文件拖入对话（每个不超过 {size}，一次最多 {n} 个）。",
        "upload_admins_only": "只有管理员可以向知识库添加文档；{files} 未保存。",
        "upload_too_many": "一次最多拖入 {limit} 个文件；{files} 未保存。",
        "upload_received": "📄 已收到 `{name}`（{size}）：正在索引…",
        "upload_done": "✅ `{name}` {status}：{chunks}，{visible}。",
        "passage_one": "{n} 个段落", "passage_many": "{n} 个段落",
        "upload_added": "已添加", "upload_updated": "已替换", "upload_unchanged": "未变化（已索引）",
        "visible_public": "所有人可见", "visible_private": "仅 `*` 用户可见（RAG_UNGROUPED）",
        "visible_groups": "仅 {groups} 组可见", "visible_locked": "已锁定（仅 `*` 用户可见）",
        "upload_failed": "⚠️ `{name}` 未添加：{reason}",
        "upload_busy": "索引繁忙（{reason}）",
        "upload_error": "出错了（参考编号 {ref}）",
        "upload_exists": "`{name}` 已在知识库中。要用您拖入的文件替换它吗？",
        "upload_replace": "替换", "upload_keep": "保留已索引的版本",
        "upload_kept": "保留了已索引的版本",
    },
}


def pick_language(accept_language: str) -> Language:
    """Chinese when the browser prefers any zh variant before English, else English."""
    for part in accept_language.split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("zh"):
            return "zh"
        if tag.startswith("en"):
            return "en"
    return "en"


def text(language: Language, key: str, **values: object) -> str:
    """The UI string `key` in `language`, filled with `values`."""
    return TEXTS[language][key].format(**values)
