#!/usr/bin/env python3
"""Small GitHub issues client (standard library only).

  issues.py list OWNER/REPO [--state open|closed|all] [--limit N]
  issues.py search OWNER/REPO QUERY [--limit N]
  issues.py create OWNER/REPO --title T --body-file F
  issues.py comment OWNER/REPO NUMBER --body-file F

Reads the token from the GITHUB_TOKEN environment variable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
import urllib.request

API = "https://api.github.com"
TIMEOUT = 30  # seconds per request


def _request(method: str, path: str, payload: dict[str, object] | None = None) -> object:
    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        sys.exit("GITHUB_TOKEN is not set; the github-issues skill needs it.")
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(  # noqa: S310 - fixed https base URL
        API + path,
        data=data,
        method=method,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "motor-cortex-github-issues",
        },
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
        return json.load(response)


def _line(issue: dict[str, object]) -> str:
    return json.dumps(
        {
            "number": issue["number"],
            "title": issue["title"],
            "state": issue["state"],
            "author": (issue.get("user") or {}).get("login"),
            "labels": [label["name"] for label in issue.get("labels", [])],
            "comments": issue.get("comments", 0),
            "url": issue["html_url"],
        }
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list")
    p_list.add_argument("repo")
    p_list.add_argument("--state", default="open", choices=["open", "closed", "all"])
    p_list.add_argument("--limit", type=int, default=20)
    p_search = sub.add_parser("search")
    p_search.add_argument("repo")
    p_search.add_argument("query")
    p_search.add_argument("--limit", type=int, default=20)
    p_create = sub.add_parser("create")
    p_create.add_argument("repo")
    p_create.add_argument("--title", required=True)
    p_create.add_argument("--body-file", required=True)
    p_comment = sub.add_parser("comment")
    p_comment.add_argument("repo")
    p_comment.add_argument("number", type=int)
    p_comment.add_argument("--body-file", required=True)
    args = parser.parse_args(argv)

    if args.command == "list":
        query = urllib.parse.urlencode({"state": args.state, "per_page": min(args.limit, 100)})
        issues = _request("GET", f"/repos/{args.repo}/issues?{query}")
        for issue in issues:  # type: ignore[union-attr]
            if "pull_request" not in issue:
                print(_line(issue))
    elif args.command == "search":
        q = f"repo:{args.repo} is:issue {args.query}"
        query = urllib.parse.urlencode({"q": q, "per_page": min(args.limit, 100)})
        found = _request("GET", f"/search/issues?{query}")
        for issue in found["items"]:  # type: ignore[index]
            print(_line(issue))
    elif args.command == "create":
        with open(args.body_file, encoding="utf-8") as handle:
            body = handle.read()
        issue = _request("POST", f"/repos/{args.repo}/issues", {"title": args.title, "body": body})
        print(_line(issue))  # type: ignore[arg-type]
    else:
        with open(args.body_file, encoding="utf-8") as handle:
            body = handle.read()
        comment = _request(
            "POST", f"/repos/{args.repo}/issues/{args.number}/comments", {"body": body}
        )
        print(json.dumps({"id": comment["id"], "url": comment["html_url"]}))  # type: ignore[index]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
