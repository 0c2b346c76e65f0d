"""Everything that talks to a user or client: answers with citations, batch inference, HTTP API, web page."""
