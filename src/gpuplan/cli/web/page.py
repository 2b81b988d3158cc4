"""The page's HTML: a tab and a form per command, each field beside the place for its error."""

from __future__ import annotations

import html

from gpuplan.cli.web.forms import FORMS, Field, fields


def _input(key: str, f: Field) -> str:
    ident = f"{key}-{f.name}"
    tip = html.escape(f.help, quote=True)
    if f.checkbox:
        control = f'<input type="checkbox" id="{ident}" name="{f.name}"{" checked" if f.default else ""}>'
    else:
        listed = f' list="{ident}-choices"' if f.choices else ""
        control = (
            f'<input type="text" id="{ident}" name="{f.name}" value="{html.escape(f.default, quote=True)}"'
            f' placeholder="{"(default)" if not f.default else ""}" autocomplete="off"{listed}>'
        )
        if f.choices:
            options = "".join(f'<option value="{html.escape(c, quote=True)}">' for c in f.choices)
            control += f'<datalist id="{ident}-choices">{options}</datalist>'
    return (
        f'<div class="field"><label for="{ident}" title="{tip}">{html.escape(f.label)}</label>{control}'
        f'<span class="field-error" id="{ident}-error" role="alert"></span></div>'
    )


def index_html() -> str:
    tabs, forms = [], []
    for form in FORMS:
        tabs.append(f'<button type="button" class="tab" data-cmd="{form.key}">{html.escape(form.title)}</button>')
        inputs = "".join(_input(form.key, f) for f in fields(form.key))
        forms.append(
            f'<section class="command" id="section-{form.key}" data-cmd="{form.key}" hidden>'
            f'<form class="command" data-cmd="{form.key}" novalidate>{inputs}'
            f'<div class="actions"><button type="submit">Compute</button>'
            f'<span class="form-error" role="alert"></span></div></form>'
            f'<div class="results" id="results-{form.key}"></div></section>'
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuplan</title><link rel="stylesheet" href="/static/ui.css">
<script src="/static/plotly.min.js" id="plotly" async></script><script src="/static/ui.js" defer></script></head>
<body><header><h1>gpuplan</h1><p>Plan LLM training and serving: memory, time and cost per GPU. The same numbers
as <code>gpuplan ... --json</code>; the address bar holds the form, so a plan can be shared as a link.</p>
<nav>{"".join(tabs)}</nav></header>
<main>{"".join(forms)}</main></body></html>
"""
