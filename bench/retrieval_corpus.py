"""The retrieval benchmark's corpus: hand-written target skills with natural-language queries
whose answers are known, and generated distractor skills that share their vocabulary.

The queries are phrased the way a person asks (paraphrases, not copies of a skill's description
or example queries); each names the one skill that answers it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SkillSpec:
    name: str
    description: str
    headings: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    example_queries: list[str] = field(default_factory=list)

    def skill_md(self) -> str:
        meta = ""
        if self.keywords or self.example_queries:
            meta = "metadata:\n"
            if self.keywords:
                meta += "  keywords: [" + ", ".join(self.keywords) + "]\n"
            if self.example_queries:
                meta += "  example_queries:\n" + "".join(
                    f"    - {q!r}\n" for q in self.example_queries
                )
        body = "".join(f"\n## {h}\n\nSteps.\n" for h in self.headings)
        return f"---\nname: {self.name}\ndescription: {self.description}\n{meta}---\n# {self.name}\n{body}"


T = SkillSpec
TARGETS: list[SkillSpec] = [
    T(
        "uptime-checker",
        "Check whether HTTP endpoints respond and how fast.",
        ["Status codes", "Response time"],
        ["uptime", "health check", "ping"],
        ["is my server up?"],
    ),
    T(
        "ssl-expiry",
        "Report when TLS certificates of hostnames expire.",
        ["Certificate dates"],
        ["ssl", "tls", "certificate"],
        ["when does my cert expire?"],
    ),
    T(
        "ecb-exchange-rates",
        "Fetch daily euro foreign exchange reference rates from the ECB.",
        ["Latest rates", "History"],
        ["currency", "fx", "forex"],
        ["what is the dollar worth in euros"],
    ),
    T(
        "csv-profile",
        "Profile a CSV file: columns, types, missing values, row counts.",
        ["Column statistics"],
        ["csv", "data quality"],
        ["what columns does this csv have"],
    ),
    T(
        "pdf-merge",
        "Merge several PDF documents into one file in a given order.",
        ["Ordering pages"],
        ["pdf", "combine"],
        ["join these pdfs together"],
    ),
    T(
        "pdf-to-text",
        "Extract the plain text of a PDF document, page by page.",
        ["OCR fallback"],
        ["pdf", "text extraction"],
        ["get the text out of this pdf"],
    ),
    T(
        "image-resize",
        "Resize and compress PNG and JPEG images to a maximum width.",
        ["Quality settings"],
        ["thumbnail", "shrink"],
        ["make this picture smaller"],
    ),
    T(
        "weather-forecast",
        "Get the weather forecast for a city for the next days.",
        ["Daily forecast"],
        ["weather", "rain", "temperature"],
        ["will it rain tomorrow in berlin"],
    ),
    T(
        "rss-digest",
        "Collect new items from RSS and Atom feeds into a daily digest.",
        ["Feeds", "Digest format"],
        ["rss", "atom", "news"],
        ["what's new on my feeds"],
    ),
    T(
        "github-pr-review",
        "Summarize open GitHub pull requests awaiting review.",
        ["Review queue"],
        ["pull request", "code review"],
        ["which PRs need my review"],
    ),
    T(
        "git-changelog",
        "Write a changelog from git commit messages between two tags.",
        ["Release notes"],
        ["changelog", "release"],
        ["draft release notes since v1.2"],
    ),
    T(
        "dns-lookup",
        "Resolve DNS records (A, AAAA, MX, TXT) of a domain.",
        ["Record types"],
        ["dns", "mx", "nameserver"],
        ["what are the mail servers of example.com"],
    ),
    T(
        "timezone-convert",
        "Convert a time between time zones and list world clocks.",
        ["Daylight saving"],
        ["timezone", "utc"],
        ["what time is 3pm PST in Tokyo"],
    ),
    T(
        "unit-convert",
        "Convert quantities between metric and imperial units.",
        ["Length", "Weight", "Volume"],
        ["units", "metric", "imperial"],
        ["how many kilos is 150 pounds"],
    ),
    T(
        "qr-code",
        "Generate a QR code image for a URL or text.",
        ["Error correction"],
        ["qr", "barcode"],
        ["make a qr code for my website"],
    ),
    T(
        "password-generator",
        "Generate strong random passwords and passphrases.",
        ["Entropy"],
        ["password", "passphrase"],
        ["give me a secure password"],
    ),
    T(
        "json-validate",
        "Validate JSON documents against a JSON Schema and explain errors.",
        ["Schema errors"],
        ["json schema", "validation"],
        ["does this json match the schema"],
    ),
    T(
        "regex-tester",
        "Test a regular expression against sample strings and explain matches.",
        ["Capture groups"],
        ["regex", "pattern"],
        ["why doesn't my regular expression match"],
    ),
    T(
        "sql-explain",
        "Explain a slow SQL query's plan and suggest indexes.",
        ["Query plan"],
        ["sql", "index", "performance"],
        ["why is this query slow"],
    ),
    T(
        "log-error-summary",
        "Group error lines of application logs and count each kind.",
        ["Stack traces"],
        ["logs", "errors", "exceptions"],
        ["what errors are in these logs"],
    ),
    T(
        "disk-usage",
        "Find the largest files and folders in a workspace.",
        ["Top directories"],
        ["disk", "space", "size"],
        ["what is taking up all the space"],
    ),
    T(
        "markdown-to-html",
        "Render Markdown files to standalone HTML pages.",
        ["Templates"],
        ["markdown", "html"],
        ["turn my notes into a web page"],
    ),
    T(
        "word-count",
        "Count words, sentences and reading time of a text.",
        ["Reading time"],
        ["words", "length"],
        ["how long is this essay"],
    ),
    T(
        "translate-text",
        "Translate text between languages with a glossary.",
        ["Glossary"],
        ["translation", "language"],
        ["say this in spanish"],
    ),
    T(
        "sentiment-score",
        "Score the sentiment of customer reviews from negative to positive.",
        ["Scoring"],
        ["sentiment", "reviews", "opinion"],
        ["are customers happy with the product"],
    ),
    T(
        "invoice-pdf",
        "Create a PDF invoice from line items, tax and customer details.",
        ["Line items", "Tax"],
        ["invoice", "billing"],
        ["bill acme for 10 hours of consulting"],
    ),
    T(
        "expense-categorize",
        "Categorize bank transactions into expense categories.",
        ["Categories"],
        ["expenses", "budget", "bank"],
        ["where did my money go last month"],
    ),
    T(
        "stock-quote",
        "Get the latest stock price and daily change for a ticker.",
        ["Ticker symbols"],
        ["stocks", "shares", "market"],
        ["how is apple stock doing"],
    ),
    T(
        "crypto-price",
        "Get current cryptocurrency prices from CoinGecko.",
        ["Coins"],
        ["bitcoin", "crypto", "ethereum"],
        ["what's bitcoin at right now"],
    ),
    T(
        "calendar-free-slots",
        "Find free meeting slots shared by several calendars.",
        ["Availability"],
        ["calendar", "meeting", "schedule"],
        ["when can we all meet next week"],
    ),
    T(
        "email-draft",
        "Draft a polite email reply from bullet points.",
        ["Tone"],
        ["email", "reply"],
        ["help me answer this message nicely"],
    ),
    T(
        "sitemap-crawl",
        "Crawl a website's sitemap and list broken links.",
        ["Broken links"],
        ["sitemap", "404", "links"],
        ["find dead links on my site"],
    ),
    T(
        "screenshot-page",
        "Take a screenshot of a web page at a given viewport.",
        ["Viewport"],
        ["screenshot", "browser"],
        ["capture how the homepage looks"],
    ),
    T(
        "zip-archive",
        "Pack files into a zip archive or unpack one.",
        ["Compression"],
        ["zip", "archive", "unzip"],
        ["compress this folder"],
    ),
    T(
        "hash-file",
        "Compute SHA-256 and MD5 checksums of files.",
        ["Verify downloads"],
        ["checksum", "sha256", "md5"],
        ["verify the checksum of this download"],
    ),
    T(
        "cron-explain",
        "Explain a cron expression in plain words and list next run times.",
        ["Next runs"],
        ["cron", "crontab"],
        ["when does */15 * * * * run"],
    ),
    T(
        "ip-geolocate",
        "Look up the country and network of an IP address.",
        ["ASN"],
        ["ip", "geolocation"],
        ["where is this ip address from"],
    ),
    T(
        "youtube-transcript",
        "Fetch the transcript of a YouTube video.",
        ["Captions"],
        ["youtube", "subtitles", "video"],
        ["what does this video say"],
    ),
    T(
        "package-outdated",
        "List outdated Python dependencies of a project.",
        ["Upgrades"],
        ["pip", "dependencies", "requirements"],
        ["which of my libraries need updating"],
    ),
    T(
        "docker-prune",
        "Report and remove unused Docker images and volumes.",
        ["Reclaim space"],
        ["docker", "images", "containers"],
        ["clean up old docker stuff"],
    ),
]

# (query, answer): natural-language requests, phrased apart from the target's own text.
QUERIES: list[tuple[str, str]] = [
    ("is the api server responding at all", "uptime-checker"),
    ("my website seems down, can you check", "uptime-checker"),
    ("when will the certificate for shop.example.org run out", "ssl-expiry"),
    ("how many euros do I get for 100 dollars today", "ecb-exchange-rates"),
    ("latest fx rate for the swiss franc", "ecb-exchange-rates"),
    ("tell me about the columns and empty cells in data.csv", "csv-profile"),
    ("combine invoice.pdf and receipt.pdf into a single file", "pdf-merge"),
    ("pull the text from this scanned pdf", "pdf-to-text"),
    ("shrink these photos so they're under 1000 pixels wide", "image-resize"),
    ("do I need an umbrella in paris tomorrow", "weather-forecast"),
    ("what's the temperature going to be this weekend", "weather-forecast"),
    ("summarize today's news from my feeds", "rss-digest"),
    ("which pull requests are waiting on a review", "github-pr-review"),
    ("write release notes from the commits since the last tag", "git-changelog"),
    ("look up the MX records for example.com", "dns-lookup"),
    ("convert 9am new york time to berlin time", "timezone-convert"),
    ("how many miles is 42 kilometers", "unit-convert"),
    ("create a qr code that links to my portfolio", "qr-code"),
    ("I need a strong password for my router", "password-generator"),
    ("check this json against the schema file", "json-validate"),
    ("my regex isn't matching phone numbers, why", "regex-tester"),
    ("this sql select takes 30 seconds, what index would help", "sql-explain"),
    ("what exceptions keep showing up in app.log", "log-error-summary"),
    ("which folders use the most disk space", "disk-usage"),
    ("render README.md as an html page", "markdown-to-html"),
    ("how many words and minutes of reading is this article", "word-count"),
    ("translate this paragraph into german", "translate-text"),
    ("are the customer reviews mostly positive or negative", "sentiment-score"),
    ("make an invoice for acme corp with 19% tax", "invoice-pdf"),
    ("sort my bank transactions into budget categories", "expense-categorize"),
    ("what's the share price of microsoft", "stock-quote"),
    ("current price of ethereum", "crypto-price"),
    ("find a time when alice, bob and I are all free", "calendar-free-slots"),
    ("draft a friendly reply to this email", "email-draft"),
    ("are there any broken links on my site", "sitemap-crawl"),
    ("take a screenshot of example.com on a phone-sized screen", "screenshot-page"),
    ("unzip the archive I uploaded", "zip-archive"),
    ("compute the sha256 of this iso", "hash-file"),
    ("what does the crontab line 0 3 * * 1 mean", "cron-explain"),
    ("which country is 8.8.8.8 in", "ip-geolocate"),
    ("get me the subtitles of this youtube link", "youtube-transcript"),
    ("which pip packages in requirements.txt are out of date", "package-outdated"),
    ("free up space taken by unused docker images", "docker-prune"),
    ("is my server up", "uptime-checker"),
    ("convert this markdown to html", "markdown-to-html"),
    ("merge two pdf files", "pdf-merge"),
    ("bitcoin price", "crypto-price"),
    ("what time is it in tokyo when it's noon in london", "timezone-convert"),
    ("validate my json", "json-validate"),
    ("resize an image", "image-resize"),
]

SERVICES = (
    "stripe github gitlab jira slack notion gmail outlook dropbox s3 postgres mysql redis twilio "
    "sendgrid shopify hubspot salesforce zendesk trello asana figma airtable discord telegram "
    "youtube spotify openweather coingecko ecb zoom calendly docusign quickbooks xero paypal "
    "mailchimp intercom datadog pagerduty"
).split()
ACTIONS = (
    "list create update delete export import sync search archive summarize monitor backup "
    "notify validate convert merge schedule tag report count download upload translate clean audit"
).split()
OBJECTS = (
    "invoices customers issues messages files tables events tickets orders contacts pages "
    "records images playlists payments reports users logs alerts documents"
).split()
PHRASES = (
    "through the {s} API",
    "for a workspace in {s}",
    "with a filter on date and owner",
    "and write the result to a CSV file",
    "and post a short summary",
    "using an API token from the vault",
)


SIBLING_ACTIONS = ("audit", "schedule", "backup")


def siblings() -> list[SkillSpec]:
    """Three near misses per target: skills about the target's main keyword that do something
    else with it ("ssl-audit", "currency-schedule"), so a query must be matched on what it asks
    for, not only on its topic."""
    out = []
    seen = {t.name for t in TARGETS}
    for t in TARGETS:
        topic = t.keywords[0] if t.keywords else t.name.split("-")[0]
        slug = "-".join(topic.lower().replace("/", " ").split())
        for action in SIBLING_ACTIONS:
            name = f"{slug}-{action}"
            if name in seen:
                continue
            seen.add(name)
            out.append(
                SkillSpec(
                    name=name,
                    description=f"{action.capitalize()} {topic} settings and history for a team.",
                    headings=[f"{action.capitalize()} {topic}"],
                    keywords=[topic, action],
                    example_queries=[f"{action} our {topic}"],
                )
            )
    return out


def distractors(n: int, *, seed: int = 7) -> list[SkillSpec]:
    """`n` skills that are not answers: the targets' near misses (`siblings`), then generated
    "<service>-<action>-<object>" skills with templated text."""
    near = siblings()[:n]
    n -= len(near)
    rng = random.Random(seed)
    combos = [(s, a, o) for s in SERVICES for a in ACTIONS for o in OBJECTS]
    rng.shuffle(combos)
    if n > len(combos):
        raise ValueError(f"at most {len(combos)} distractors")
    out = list(near)
    for s, a, o in combos[:n]:
        phrase = rng.choice(PHRASES).format(s=s.capitalize())
        out.append(
            SkillSpec(
                name=f"{s}-{a}-{o}",
                description=f"{a.capitalize()} {o} in {s.capitalize()} {phrase}.",
                headings=[f"{a.capitalize()} {o}", "Authentication", "Errors"],
                keywords=[s, o, a],
                example_queries=[f"{a} my {s} {o}"],
            )
        )
    return out
