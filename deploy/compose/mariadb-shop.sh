#!/bin/bash
# MariaDB init (docker-entrypoint-initdb.d): a small `shop` schema and a SELECT-only account for
# the gateway. The password comes from the environment (.env), never from this file.
set -euo pipefail
mariadb -uroot -p"${MARIADB_ROOT_PASSWORD}" <<SQL
CREATE DATABASE IF NOT EXISTS shop;
USE shop;
CREATE TABLE customers (
  id INT PRIMARY KEY AUTO_INCREMENT,
  name VARCHAR(100) NOT NULL,
  country CHAR(2) NOT NULL,
  created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
) COMMENT 'people who ordered';
CREATE TABLE products (
  id INT PRIMARY KEY AUTO_INCREMENT,
  sku VARCHAR(32) NOT NULL UNIQUE,
  title VARCHAR(200) NOT NULL,
  description TEXT NOT NULL,
  price_cents INT NOT NULL CHECK (price_cents >= 0),
  updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP
) COMMENT 'the catalogue';
CREATE TABLE orders (
  id INT PRIMARY KEY AUTO_INCREMENT,
  customer_id INT NOT NULL,
  product_id INT NOT NULL,
  quantity INT NOT NULL DEFAULT 1,
  ordered_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
  FOREIGN KEY (customer_id) REFERENCES customers (id),
  FOREIGN KEY (product_id) REFERENCES products (id)
);
INSERT INTO customers (name, country) VALUES ('Ada', 'GB'), ('Grace', 'US'), ('Linus', 'FI'), ('Margaret', 'US');
INSERT INTO products (sku, title, description, price_cents) VALUES
  ('KB-01', 'Mechanical keyboard', 'A tenkeyless keyboard with tactile switches and a detachable USB-C cable.', 8900),
  ('MS-02', 'Wireless mouse', 'An ergonomic mouse with a silent click, Bluetooth and a 2.4 GHz receiver.', 3900),
  ('MN-27', '27 inch monitor', 'A 2560x1440 IPS panel at 144 Hz with height adjustment.', 32900),
  ('DK-10', 'USB-C dock', 'Two displays, gigabit Ethernet and 100 W pass-through charging.', 15900);
INSERT INTO orders (customer_id, product_id, quantity) VALUES (1, 1, 1), (2, 3, 2), (3, 2, 1), (4, 4, 1), (1, 2, 3);
CREATE USER IF NOT EXISTS 'mcp_reader'@'%' IDENTIFIED BY '${SHOP_READER_PASSWORD}';
GRANT SELECT, SHOW VIEW ON shop.* TO 'mcp_reader'@'%';
SQL
