// DP16KD behaviour for tb/flow/test_outreg.py: yosys ships the DP16KD as a blackbox
// (share/lattice/cells_sim_ecp5.v), so the equivalence test of rnic_flow.outreg simulates both
// netlists against this model, written after Lattice's simulation model of the family's block
// RAM. It covers what the test's netlists use, with chip selects unused and INITVAL zero:
//   * both ports 18 bits wide (word address AD[13:4], AD[1:0] the byte enables of a write);
//   * the 36-bit pseudo-dual-port mode of yosys' PDPW16KD mapping: port A writes 36 bits
//     ({DIB, DIA}, word address ADA[13:5], ADA[3:0] the byte enables), port B reads 36 bits
//     ({DOB, DOA}, word address ADB[13:5]) under port B's controls, REGMODE_A choosing the
//     register of the DOA half.
// Per port, on its clock edge (CLKxMUX "INV": the falling edge):
//   read latch: RST=1 clears it; else CE=1: a write (WE=1) stores the enabled 9-bit bytes and
//     the latch takes the old word (READBEFOREWRITE), the new word (WRITETHROUGH) or keeps its
//     value (NORMAL); a read (WE=0) loads the addressed word;
//   output register: when OCE=1 it loads the read latch as it was before this edge, or 0 when
//     RST=1; CE does not gate it.
// DO is the read latch (NOREG) or the output register (OUTREG). Everything starts at 0 (the
// global reset at configuration). Reads see the array as it was before the edge.
module DP16KD(
  input DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
  input ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0,
  input CEA, OCEA, CLKA, WEA, RSTA,
  input CSA2, CSA1, CSA0,
  output DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,
  input DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
  input ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0,
  input CEB, OCEB, CLKB, WEB, RSTB,
  input CSB2, CSB1, CSB0,
  output DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
  parameter DATA_WIDTH_A = 18;
  parameter DATA_WIDTH_B = 18;
  parameter REGMODE_A = "NOREG";
  parameter REGMODE_B = "NOREG";
  parameter RESETMODE = "SYNC";
  parameter ASYNC_RESET_RELEASE = "SYNC";
  parameter CSDECODE_A = "0b000";
  parameter CSDECODE_B = "0b000";
  parameter WRITEMODE_A = "NORMAL";
  parameter WRITEMODE_B = "NORMAL";
  parameter CLKAMUX = "CLKA";
  parameter CLKBMUX = "CLKB";
  parameter GSR = "ENABLED";
  parameter INIT_DATA = "STATIC";
  parameter INITVAL_00 = 320'h0;
  parameter INITVAL_01 = 320'h0;
  parameter INITVAL_02 = 320'h0;
  parameter INITVAL_03 = 320'h0;
  parameter INITVAL_04 = 320'h0;
  parameter INITVAL_05 = 320'h0;
  parameter INITVAL_06 = 320'h0;
  parameter INITVAL_07 = 320'h0;
  parameter INITVAL_08 = 320'h0;
  parameter INITVAL_09 = 320'h0;
  parameter INITVAL_0A = 320'h0;
  parameter INITVAL_0B = 320'h0;
  parameter INITVAL_0C = 320'h0;
  parameter INITVAL_0D = 320'h0;
  parameter INITVAL_0E = 320'h0;
  parameter INITVAL_0F = 320'h0;
  parameter INITVAL_10 = 320'h0;
  parameter INITVAL_11 = 320'h0;
  parameter INITVAL_12 = 320'h0;
  parameter INITVAL_13 = 320'h0;
  parameter INITVAL_14 = 320'h0;
  parameter INITVAL_15 = 320'h0;
  parameter INITVAL_16 = 320'h0;
  parameter INITVAL_17 = 320'h0;
  parameter INITVAL_18 = 320'h0;
  parameter INITVAL_19 = 320'h0;
  parameter INITVAL_1A = 320'h0;
  parameter INITVAL_1B = 320'h0;
  parameter INITVAL_1C = 320'h0;
  parameter INITVAL_1D = 320'h0;
  parameter INITVAL_1E = 320'h0;
  parameter INITVAL_1F = 320'h0;
  parameter INITVAL_20 = 320'h0;
  parameter INITVAL_21 = 320'h0;
  parameter INITVAL_22 = 320'h0;
  parameter INITVAL_23 = 320'h0;
  parameter INITVAL_24 = 320'h0;
  parameter INITVAL_25 = 320'h0;
  parameter INITVAL_26 = 320'h0;
  parameter INITVAL_27 = 320'h0;
  parameter INITVAL_28 = 320'h0;
  parameter INITVAL_29 = 320'h0;
  parameter INITVAL_2A = 320'h0;
  parameter INITVAL_2B = 320'h0;
  parameter INITVAL_2C = 320'h0;
  parameter INITVAL_2D = 320'h0;
  parameter INITVAL_2E = 320'h0;
  parameter INITVAL_2F = 320'h0;
  parameter INITVAL_30 = 320'h0;
  parameter INITVAL_31 = 320'h0;
  parameter INITVAL_32 = 320'h0;
  parameter INITVAL_33 = 320'h0;
  parameter INITVAL_34 = 320'h0;
  parameter INITVAL_35 = 320'h0;
  parameter INITVAL_36 = 320'h0;
  parameter INITVAL_37 = 320'h0;
  parameter INITVAL_38 = 320'h0;
  parameter INITVAL_39 = 320'h0;
  parameter INITVAL_3A = 320'h0;
  parameter INITVAL_3B = 320'h0;
  parameter INITVAL_3C = 320'h0;
  parameter INITVAL_3D = 320'h0;
  parameter INITVAL_3E = 320'h0;
  parameter INITVAL_3F = 320'h0;

  localparam PDP = DATA_WIDTH_B == 36;
  wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
  wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
  wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
  wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
  wire clka = CLKAMUX == "INV" ? ~CLKA : CLKA;
  wire clkb = CLKBMUX == "INV" ? ~CLKB : CLKB;
  reg [17:0] latcha = 18'd0, latchb = 18'd0, rega = 18'd0, regb = 18'd0;
  assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = REGMODE_A == "OUTREG" ? rega : latcha;
  assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = REGMODE_B == "OUTREG" ? regb : latchb;

  // both ports 18 bits wide
  reg [17:0] mem [0:1023];
  wire [17:0] maska = {{9{ada[1]}}, {9{ada[0]}}};
  wire [17:0] maskb = {{9{adb[1]}}, {9{adb[0]}}};
  wire [17:0] newa = (mem[ada[13:4]] & ~maska) | (dia & maska);
  wire [17:0] newb = (mem[adb[13:4]] & ~maskb) | (dib & maskb);
  always @(posedge clka) begin
    if (!PDP) begin
      if (OCEA) rega <= RSTA ? 18'd0 : latcha;
      if (RSTA) latcha <= 18'd0;
      else if (CEA) begin
        if (WEA) begin
          mem[ada[13:4]] <= newa;
          if (WRITEMODE_A == "READBEFOREWRITE") latcha <= mem[ada[13:4]];
          else if (WRITEMODE_A == "WRITETHROUGH") latcha <= newa;
        end else
          latcha <= mem[ada[13:4]];
      end
    end
  end
  always @(posedge clkb) begin
    if (!PDP) begin
      if (OCEB) regb <= RSTB ? 18'd0 : latchb;
      if (RSTB) latchb <= 18'd0;
      else if (CEB) begin
        if (WEB) begin
          mem[adb[13:4]] <= newb;
          if (WRITEMODE_B == "READBEFOREWRITE") latchb <= mem[adb[13:4]];
          else if (WRITEMODE_B == "WRITETHROUGH") latchb <= newb;
        end else
          latchb <= mem[adb[13:4]];
      end
    end
  end

  // the 36-bit pseudo-dual-port mode: A writes, B reads, both halves under port B's controls
  reg [35:0] mem36 [0:511];
  wire [35:0] mask36 = {{9{ada[3]}}, {9{ada[2]}}, {9{ada[1]}}, {9{ada[0]}}};
  always @(posedge clka)
    if (PDP && CEA && WEA)
      mem36[ada[13:5]] <= (mem36[ada[13:5]] & ~mask36) | ({dib, dia} & mask36);
  always @(posedge clkb) begin
    if (PDP) begin
      if (OCEB) {regb, rega} <= RSTB ? 36'd0 : {latchb, latcha};
      if (RSTB) {latchb, latcha} <= 36'd0;
      else if (CEB) {latchb, latcha} <= mem36[adb[13:5]];
    end
  end

  integer i;
  initial begin
    if (!(DATA_WIDTH_A == 18 && DATA_WIDTH_B == 18 || DATA_WIDTH_A == 36 && DATA_WIDTH_B == 36)
        || CSDECODE_A != "0b000" || CSDECODE_B != "0b000")
      $fatal(1, "DP16KD model: 18/18 or 36/36 ports, no chip select");
    for (i = 0; i < 1024; i = i + 1) mem[i] = 18'd0;
    for (i = 0; i < 512; i = i + 1) mem36[i] = 36'd0;
  end
endmodule
