#!/bin/bash
# PostgreSQL init (docker-entrypoint-initdb.d): a `kb` database of support articles (the RAG
# source of the compose stack) and a read-only role. The password comes from the environment.
set -euo pipefail
psql -v ON_ERROR_STOP=1 -U postgres <<SQL
CREATE DATABASE kb;
SQL
psql -v ON_ERROR_STOP=1 -U postgres -d kb <<SQL
CREATE TABLE articles (
  id SERIAL PRIMARY KEY,
  title TEXT NOT NULL,
  body TEXT NOT NULL,
  category TEXT NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
COMMENT ON TABLE articles IS 'support knowledge base';
INSERT INTO articles (title, body, category) VALUES
  ('Resetting a password', 'Open Settings, choose Security and press Reset password. A link valid for one hour arrives by e-mail.', 'account'),
  ('Returning an order', 'Orders can be returned within 30 days. Print the label from the order page and drop the parcel at any post office.', 'orders'),
  ('Connecting two monitors', 'The USB-C dock drives two displays: one over HDMI and one over DisplayPort, up to 4K at 60 Hz each.', 'hardware'),
  ('Keyboard switches', 'Tactile switches give a bump without the click; linear switches are smooth; clicky switches are loud.', 'hardware'),
  ('Shipping times', 'Orders placed before 14:00 ship the same day. Delivery takes one to three working days within the EU.', 'orders');
CREATE ROLE kb_reader LOGIN PASSWORD '${KB_READER_PASSWORD}';
GRANT CONNECT ON DATABASE kb TO kb_reader;
GRANT USAGE ON SCHEMA public TO kb_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO kb_reader;
ALTER ROLE kb_reader SET default_transaction_read_only = on;
SQL
