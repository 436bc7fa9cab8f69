-- cfssl's certificate database (certdb), the table its postgres driver writes
-- (golang-cfssl 1.2: serial_number, authority_key_identifier, ca_label,
-- status, reason, expiry, revoked_at, pem), in its own database.
CREATE TABLE certificates (
	serial_number            bytea NOT NULL,
	authority_key_identifier bytea NOT NULL,
	ca_label                 bytea,
	status                   bytea NOT NULL,
	reason                   int,
	expiry                   timestamptz,
	revoked_at               timestamptz,
	pem                      bytea NOT NULL,
	PRIMARY KEY (serial_number, authority_key_identifier)
);
CREATE TABLE ocsp_responses (
	serial_number            bytea NOT NULL,
	authority_key_identifier bytea NOT NULL,
	body                     bytea NOT NULL,
	expiry                   timestamptz,
	PRIMARY KEY (serial_number, authority_key_identifier),
	FOREIGN KEY (serial_number, authority_key_identifier)
		REFERENCES certificates (serial_number, authority_key_identifier)
);
