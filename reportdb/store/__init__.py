"""Storage layer: connection settings, ORM models, chunked blobs and open-time schema decisions."""
